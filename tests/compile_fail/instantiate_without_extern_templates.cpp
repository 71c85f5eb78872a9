// SPDX-License-Identifier: Apache-2.0
// ddo/instantiate.hpp in a TU compiled without DDO_EXTERN_TEMPLATES: exactly one error, the
// #error that names the macro (issue 40: a second, confusing error followed it).
#include <ddo/instantiate.hpp>
