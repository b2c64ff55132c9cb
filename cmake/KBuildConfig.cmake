# KBuildConfig.cmake: the CMake side of kbuild.
#
# find_package(KBuild CONFIG REQUIRED) gives:
#   KBuild_PYTHON             the Python interpreter that runs `python -m kbuild`
#   KBuild_VERSION            kbuild's version
#   KBuild_CUDA_INCLUDE_DIR   the directory of the cuda.h that ships with Triton
#   kbuild_add_kernels(<target> [CONFIG pyproject.toml] [PREFIX kbuild_] [BASENAME kbuild_kernels]
#                      [TARGETS sm_80,sm_90] [LOCKED] [STRICT] [MANIFEST_DESTINATION <dir>])
#
# kbuild_add_kernels adds a build step (add_custom_command, with the kernel sources, pyproject.toml
# and kbuild.lock as dependencies) that runs `python -m kbuild emit`: compile or look up every
# [tool.kbuild] kernel x target, and write <BASENAME>.h/.c (the cubins and one launcher per kernel)
# and kbuild.json (the manifest). The sources are compiled into <target>; its code includes
# "<BASENAME>.h". Under scikit-build-core the manifest is installed into the wheel's .dist-info.
#
# Variables read (e.g. -DKBUILD_LOCKED=ON or scikit-build-core's cmake.define):
#   KBUILD_LOCKED / KBUILD_STRICT   like the LOCKED / STRICT options
#   KBUILD_MANIFEST                 set by kbuild's PEP 517 backend: emit exactly these artefacts
#   KBUILD_PRERENDERED, KBUILD_DEPENDS
#                                   set by the backend too: sources it already rendered (default PREFIX
#                                   and BASENAME) and the files they depend on, so that an all-hit
#                                   build runs no Python at configure or build time
#
# The build step runs `python -m kbuild.commands.emit` (the `kbuild emit` verb without the rest
# of the CLI, which keeps all-hit builds cheap).
include_guard(GLOBAL)

get_filename_component(_kbuild_pkg_dir "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
set(KBuild_PACKAGE_DIR "${_kbuild_pkg_dir}")

if(NOT DEFINED KBuild_PYTHON)
  if(DEFINED Python_EXECUTABLE)
    set(KBuild_PYTHON "${Python_EXECUTABLE}")
  elseif(DEFINED PYTHON_EXECUTABLE)
    set(KBuild_PYTHON "${PYTHON_EXECUTABLE}")
  else()
    find_package(Python COMPONENTS Interpreter REQUIRED)
    set(KBuild_PYTHON "${Python_EXECUTABLE}")
  endif()
endif()

# Triton's cuda.h: next to kbuild in the same site-packages, or asked of Python (in kbuild_add_kernels).
if(NOT KBuild_CUDA_INCLUDE_DIR AND EXISTS "${KBuild_PACKAGE_DIR}/../triton/backends/nvidia/include/cuda.h")
  get_filename_component(KBuild_CUDA_INCLUDE_DIR "${KBuild_PACKAGE_DIR}/../triton/backends/nvidia/include" ABSOLUTE)
endif()

function(kbuild_add_kernels target)
  cmake_parse_arguments(PARSE_ARGV 1 KB "LOCKED;STRICT" "CONFIG;PREFIX;BASENAME;TARGETS;MANIFEST_DESTINATION" "")
  if(KB_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "kbuild_add_kernels(${target}): unknown arguments: ${KB_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT TARGET ${target})
    message(FATAL_ERROR "kbuild_add_kernels(${target}): no such target; call it after add_library/Python_add_library")
  endif()
  get_property(_langs GLOBAL PROPERTY ENABLED_LANGUAGES)
  if(NOT "C" IN_LIST _langs)
    message(FATAL_ERROR "kbuild_add_kernels(${target}): the generated launchers are C; enable it: project(... LANGUAGES C ...)")
  endif()
  if(NOT KB_CONFIG)
    set(KB_CONFIG "${CMAKE_CURRENT_SOURCE_DIR}/pyproject.toml")
  endif()
  get_filename_component(KB_CONFIG "${KB_CONFIG}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  if(NOT EXISTS "${KB_CONFIG}")
    message(FATAL_ERROR "kbuild_add_kernels(${target}): CONFIG ${KB_CONFIG}: no such file")
  endif()
  if(NOT KB_PREFIX)
    set(KB_PREFIX "kbuild_")
  endif()
  if(NOT KB_BASENAME)
    set(KB_BASENAME "kbuild_kernels")
  endif()

  if(KBUILD_DEPENDS AND KBuild_CUDA_INCLUDE_DIR)
    set(_deps ${KBUILD_DEPENDS})  # the backend checked [tool.kbuild] already
  else()
    # Configure time: check [tool.kbuild], find cuda.h, list the files the kernels depend on
    # (imports neither Triton nor the kernels).
    execute_process(
      COMMAND "${KBuild_PYTHON}" -m kbuild.commands.emit --config "${KB_CONFIG}" --list-sources --print-include-dir
      OUTPUT_VARIABLE _deps
      ERROR_VARIABLE _err
      RESULT_VARIABLE _rc)
    if(NOT _rc EQUAL 0)
      string(STRIP "${_err}" _err)
      message(FATAL_ERROR "kbuild_add_kernels(${target}): ${_err}")
    endif()
    string(STRIP "${_deps}" _deps)
    string(REPLACE "\n" ";" _deps "${_deps}")
    list(POP_FRONT _deps _inc)
    if(NOT KBuild_CUDA_INCLUDE_DIR)
      set(KBuild_CUDA_INCLUDE_DIR "${_inc}" CACHE PATH "Directory of the cuda.h bundled with Triton")
    endif()
  endif()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${KB_CONFIG}")

  set(_out "${CMAKE_CURRENT_BINARY_DIR}/kbuild/${target}")
  set(_args --config "${KB_CONFIG}" --out-dir "${_out}" --prefix "${KB_PREFIX}" --basename "${KB_BASENAME}")
  if(KB_TARGETS)
    string(REPLACE ";" "," KB_TARGETS "${KB_TARGETS}")
    list(APPEND _args --targets "${KB_TARGETS}")
  endif()
  if(KB_LOCKED OR KBUILD_LOCKED)
    list(APPEND _args --locked)
  endif()
  if(KB_STRICT OR KBUILD_STRICT)
    list(APPEND _args --strict)
  endif()
  if(KBUILD_MANIFEST)
    list(APPEND _args --from-manifest "${KBUILD_MANIFEST}")
    list(APPEND _deps "${KBUILD_MANIFEST}")
  endif()

  set(_c "${_out}/${KB_BASENAME}.c")
  set(_h "${_out}/${KB_BASENAME}.h")
  set(_manifest "${_out}/kbuild.json")
  get_filename_component(_config_name "${KB_CONFIG}" NAME)
  if(KBUILD_PRERENDERED AND KB_PREFIX STREQUAL "kbuild_" AND KB_BASENAME STREQUAL "kbuild_kernels"
     AND NOT KB_TARGETS AND NOT KB_LOCKED AND NOT KB_STRICT)
    # The backend ran the pipeline and rendered these already: copy them.
    add_custom_command(
      OUTPUT "${_c}" "${_h}" "${_manifest}"
      COMMAND "${CMAKE_COMMAND}" -E make_directory "${_out}"
      COMMAND "${CMAKE_COMMAND}" -E copy "${KBUILD_PRERENDERED}/kbuild_kernels.c" "${KBUILD_PRERENDERED}/kbuild_kernels.h"
              "${KBUILD_PRERENDERED}/kbuild.json" "${_out}"
      DEPENDS ${_deps} "${KBUILD_PRERENDERED}/kbuild_kernels.c" "${KBUILD_PRERENDERED}/kbuild_kernels.h"
              "${KBUILD_PRERENDERED}/kbuild.json"
      COMMENT "kbuild: kernels of ${_config_name} for ${target} (rendered by the build backend)"
      VERBATIM)
  else()
    add_custom_command(
      OUTPUT "${_c}" "${_h}" "${_manifest}"
      COMMAND "${KBuild_PYTHON}" -m kbuild.commands.emit ${_args}
      DEPENDS ${_deps}
      COMMENT "kbuild: kernels of ${_config_name} for ${target}"
      VERBATIM)
  endif()
  target_sources(${target} PRIVATE "${_c}" "${_h}")
  target_include_directories(${target} PRIVATE "${_out}" "${KBuild_CUDA_INCLUDE_DIR}")
  find_package(Threads REQUIRED)
  target_link_libraries(${target} PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
  if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
    # Reproducible objects: no build or source directory in anything the compiler records.
    target_compile_options(${target} PRIVATE
      "-ffile-prefix-map=${CMAKE_BINARY_DIR}=build" "-ffile-prefix-map=${CMAKE_SOURCE_DIR}=.")
  endif()
  if(KB_MANIFEST_DESTINATION)
    install(FILES "${_manifest}" DESTINATION "${KB_MANIFEST_DESTINATION}")
  elseif(DEFINED SKBUILD_METADATA_DIR)
    install(FILES "${_manifest}" DESTINATION "${SKBUILD_METADATA_DIR}")
  endif()
  set(KBuild_${target}_HEADER "${_h}" PARENT_SCOPE)
  set(KBuild_${target}_MANIFEST "${_manifest}" PARENT_SCOPE)
endfunction()
