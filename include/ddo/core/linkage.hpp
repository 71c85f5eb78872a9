// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// @brief How ddo's code is compiled into a program: header-only (the default) or once, in one
/// translation unit of the program (DDO_EXTERN_TEMPLATES).
///
/// Header-only, every TU that calls into ddo compiles what it calls: the setup path (resolver,
/// planner, profiles), the runtime core for its transport. An engine with many TUs compiles
/// every TU with DDO_EXTERN_TEMPLATES defined and includes
/// `<ddo/instantiate.hpp>` in exactly one of them (docs/getting-started.md,
/// "Compile ddo once"). In that mode:
/// - ddo's non-template functions whose bodies live in `detail/*_impl.hpp` are declared in
///   their headers only (DDO_INLINE is empty, DDO_HEADER_ONLY is 0) and defined, not inline, in
///   the instantiating TU;
/// - the offloader's runtime core and the setup path (with the default planner and pin
///   selector) are declared extern for the transports the setup path constructs (host_sim,
///   linear, vmm, and the file route over linear and vmm; runtime/basic_offloader.hpp,
///   setup/instantiations.hpp) and instantiated in that TU.
/// Every TU of a program must be compiled in the same mode: a function inline in one TU and
/// not in another breaks the one-definition rule.

#if defined(DDO_INSTANTIATE)
#error "DDO_INSTANTIATE is gone: include <ddo/instantiate.hpp> (see ddo/core/linkage.hpp)"
#endif

#if defined(DDO_EXTERN_TEMPLATES)
/// Declares and defines a non-template function whose body is in a detail/*_impl.hpp header:
/// inline when ddo is header-only, an ordinary function compiled once otherwise.
#define DDO_INLINE
/// 1 when the impl headers are included by the headers that declare their functions.
#define DDO_HEADER_ONLY 0
#else
#define DDO_INLINE inline
#define DDO_HEADER_ONLY 1
#endif

#if defined(DDO_EXTERN_TEMPLATES)
namespace ddo {
inline namespace v0 {
namespace detail {
/// Defined by ddo/instantiate.hpp. Every TU compiled with DDO_EXTERN_TEMPLATES refers to it, so
/// a program that lacks the instantiating TU fails to link with this name first among the
/// missing symbols ("undefined reference to
/// `ddo::v0::detail::compiled_once_needs_one_tu_including_ddo_instantiate_hpp'"), rather than
/// with dozens of bare offloader_core<...> lines and no hint.
extern const int compiled_once_needs_one_tu_including_ddo_instantiate_hpp;
/// The reference to it: `used` keeps it (and the undefined symbol) at every optimisation level; one
/// pointer per TU.
[[maybe_unused]] __attribute__((used)) static const int* const compiled_once_check =
    &compiled_once_needs_one_tu_including_ddo_instantiate_hpp;
// The pointer above sits in a data section, which the linker reports after the TU's code: a
// program calling ddo's functions got a dozen bare "undefined reference" lines before it. The
// linker reports a TU's undefined symbols in the order of its sections, .text first, by offset;
// a top-level asm statement is emitted before any function, so this relocation at the start of
// .text (a no-op one: no bytes, nothing for the loader) is the first line of the error. The
// name is the declaration's mangled one (the build check compiled_once_link_error links a
// program without ddo/instantiate.hpp and wants it first).
#if defined(__ELF__) && !defined(__CUDA_ARCH__) && (defined(__x86_64__) || defined(__aarch64__))
#if defined(__x86_64__)
#define DDO_DETAIL_RELOC_NONE "R_X86_64_NONE"
#else
#define DDO_DETAIL_RELOC_NONE "R_AARCH64_NONE"
#endif
__asm__(".pushsection .text\n\t.reloc ., " DDO_DETAIL_RELOC_NONE
        ", _ZN3ddo2v06detail56compiled_once_needs_one_tu_including_ddo_instantiate_hppE\n\t"
        ".popsection");
#undef DDO_DETAIL_RELOC_NONE
#endif
}  // namespace detail
}  // namespace v0
}  // namespace ddo
#endif
