# KBuildConfig.cmake: the CMake side of kbuild.
#
# find_package(KBuild CONFIG REQUIRED) gives:
#   KBuild_PYTHON       the Python interpreter that runs `python -m kbuild`
#   KBuild_VERSION      kbuild's version
#
# kbuild_add_kernels(<target> ...) arrives with the build-hooks issue; until then
# it stops the configure step with a clear message rather than doing nothing.
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

function(kbuild_add_kernels target)
  message(FATAL_ERROR
    "kbuild_add_kernels(${target}): linking kernels into a CMake target is not implemented in this "
    "kbuild version yet (see the build-hooks issue).")
endfunction()
