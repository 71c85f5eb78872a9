// SPDX-License-Identifier: Apache-2.0
// The instantiating TU of the compile-once consumer (tools/check-consumers): with consumer.cpp,
// both compiled with DDO_EXTERN_TEMPLATES, a program that compiles ddo once from the installed
// headers.
#include <ddo/instantiate.hpp>
