# Included after every project() of llama-cpp-python's build (.ci/run passes it as
# CMAKE_PROJECT_INCLUDE). llama-cpp-python forces llama.cpp's `common` library on, but its
# Python package loads only libllama and the ggml libraries: `common` (chat parsers, argument
# parsing, JSON) was 205 of the build's 473 CPU-seconds on 2 cores. At the end of the top
# directory its target is left with one empty source, so the install step still finds a
# libllama-common.so and nothing compiles it.
if(NOT COMMAND contextfold_empty_common)
    set(CONTEXTFOLD_EMPTY_COMMON "${CMAKE_BINARY_DIR}/contextfold-empty-common.cpp")
    file(WRITE "${CONTEXTFOLD_EMPTY_COMMON}" "// llama-common, left empty by .ci/llama-without-common.cmake\n")
    function(contextfold_empty_common)
        if(TARGET llama-common)
            set_property(TARGET llama-common PROPERTY SOURCES "${CONTEXTFOLD_EMPTY_COMMON}")
            message(STATUS "contextfold: llama-common left empty")
        endif()
    endfunction()
    cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL contextfold_empty_common)
endif()
