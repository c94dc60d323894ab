# The fuzz targets' ctest entries, included by tests/CMakeLists.txt (the main, gcc build):
# fixture.fuzz_build builds tests/fuzz as its own clang project in ${CMAKE_BINARY_DIR}/fuzz,
# then fuzz.<name> runs each target of targets.cmake for COMPUTE_FUZZ_SECONDS (default 20) on
# a scratch copy of tests/fuzz/corpus/<name>/. It touches nothing but the build directory.
#
# On by default in the plain suite only: the fuzz build is an ASan+UBSan build whatever the
# main build is, so running it again in the sanitizer suite would repeat the same test.
if(CS_SANITIZE)
        set(cs_fuzz_default OFF)
else()
        set(cs_fuzz_default ON)
endif()
option(CS_FUZZ_TESTS "Register the fuzz targets (clang + libFuzzer) with ctest" ${cs_fuzz_default})

if(CS_FUZZ_TESTS)
        set(CS_FUZZ_DIR ${CMAKE_CURRENT_LIST_DIR})
        set(CS_FUZZ_BUILD_DIR ${CMAKE_BINARY_DIR}/fuzz)
        add_test(NAME fixture.fuzz_build
                 COMMAND bash ${CS_FUZZ_DIR}/fuzz.sh build ${CS_FUZZ_DIR} ${CS_FUZZ_BUILD_DIR})
        set_tests_properties(fixture.fuzz_build PROPERTIES FIXTURES_SETUP fuzz_build
                             TIMEOUT 900 LABELS fuzz)

        # Same signature as the fuzz build's (tests/fuzz/CMakeLists.txt): here only the name
        # matters. The timeout is a backstop; libFuzzer stops itself at COMPUTE_FUZZ_SECONDS.
        function(cs_fuzz_target name)
                add_test(NAME fuzz.${name}
                         COMMAND bash ${CS_FUZZ_DIR}/fuzz.sh run ${CS_FUZZ_BUILD_DIR} ${name}
                                 ${CS_FUZZ_DIR}/corpus/${name})
                set_tests_properties(fuzz.${name} PROPERTIES FIXTURES_REQUIRED fuzz_build
                                     TIMEOUT 3600 LABELS fuzz)
        endfunction()
        include(${CS_FUZZ_DIR}/targets.cmake)
endif()
