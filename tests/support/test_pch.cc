// The one source of tfjob_test_pch (CMakeLists.txt): the target exists to
// compile the test executables' shared precompiled header.
