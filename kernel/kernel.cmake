# kernel.cmake (included by tests/ and bench/): the kernel's own mm/zsmalloc.c from Debian's
# linux-source-6.1, compiled unchanged by the builder beside it,
# kernel_build.py (C, gcc-12, the kernel's flags; kernel/kshim.h) into a static library
# whose zsmalloc symbols live in the C++ namespace zsm::bench_kernel (objcopy --redefine-syms),
# so that it links beside zsm's own zs_* C API. The package's tarball is the input: without it
# (tools/setup.sh installs it) nothing here is built.
#
# zsm_add_kernel_ref(<target> [--set CONFIG_X=VALUE]...): an INTERFACE target that links the
# library (-no-pie: the kernel objects are not position-independent, as in a kernel) and adds
# kernel/ and the generated kapi_symbols.h to the include path.
include_guard(GLOBAL)
set(ZSM_KERNEL_TARBALL /usr/src/linux-source-6.1.tar.xz)
find_package(Python3 REQUIRED COMPONENTS Interpreter)

function(zsm_add_kernel_ref target)
  set(out ${CMAKE_BINARY_DIR}/kernel/${target})
  set(lib ${out}/lib${target}.a)
  add_custom_command(
    OUTPUT ${lib} ${out}/kapi_symbols.h
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/kernel/kernel_build.py --out ${out}
            --compiler gcc --variant kernel ${ARGN}
    COMMAND ${CMAKE_AR} rcs ${lib} ${out}/kernel.o ${out}/kservices.o ${out}/khost.o
    DEPENDS ${PROJECT_SOURCE_DIR}/kernel/kernel_build.py ${PROJECT_SOURCE_DIR}/kernel/build_inputs.py
            ${PROJECT_SOURCE_DIR}/kernel/kshim.h ${PROJECT_SOURCE_DIR}/kernel/kshim_x86_64.h
            ${PROJECT_SOURCE_DIR}/kernel/kshim_sync.h ${PROJECT_SOURCE_DIR}/kernel/kshim_mm.h
            ${PROJECT_SOURCE_DIR}/kernel/kshim_services.h
            ${PROJECT_SOURCE_DIR}/kernel/kservices.c ${PROJECT_SOURCE_DIR}/kernel/khost.c
            ${ZSM_KERNEL_TARBALL}
    COMMENT "Compiling the kernel's mm/zsmalloc.c (linux-source-6.1) for ${target}"
    VERBATIM)
  add_custom_target(${target}_objects DEPENDS ${lib})
  add_library(${target} INTERFACE)
  add_dependencies(${target} ${target}_objects)
  target_link_libraries(${target} INTERFACE ${lib})
  target_include_directories(${target} INTERFACE ${out} ${PROJECT_SOURCE_DIR}/kernel)
  target_link_options(${target} INTERFACE -no-pie)
endfunction()
