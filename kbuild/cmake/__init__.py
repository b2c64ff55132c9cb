"""kbuild's CMake package (``KBuildConfig.cmake``), found by scikit-build-core through the
``cmake.prefix`` entry point. The CMake files are installed here by kbuild's CMakeLists.txt."""
