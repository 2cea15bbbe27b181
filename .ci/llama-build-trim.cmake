# Included after every project() of llama-cpp-python's build (.ci/run passes it as
# CMAKE_PROJECT_INCLUDE). The CI builds the package only for `python -m llama_cpp.server`
# in the tests; at the end of the top directory it trims what that never runs:
# - llama.cpp's `common` library, which llama-cpp-python forces on but whose Python package
#   loads only libllama and the ggml libraries (the build took 473 CPU-seconds with it,
#   238-268 without), and the cpp-httplib it links (23 s): left with one empty source
#   each, so the install step still finds a libllama-common.so and nothing compiles them;
# - libllama at -O1 (216 of the remaining 335 compile-seconds were its sources at -O3): it
#   builds the graph and loads the file; the arithmetic is ggml's, kept at -O3, and so are
#   the grammar and the samplers, which run over the vocabulary at every decoded token.
if(NOT COMMAND contextfold_trim_llama_build)
    set(CONTEXTFOLD_EMPTY "${CMAKE_BINARY_DIR}/contextfold-empty.cpp")
    file(WRITE "${CONTEXTFOLD_EMPTY}" "// left empty by .ci/llama-build-trim.cmake\n")
    function(contextfold_trim_llama_build)
        foreach(unused llama-common cpp-httplib)
            if(TARGET ${unused})
                set_property(TARGET ${unused} PROPERTY SOURCES "${CONTEXTFOLD_EMPTY}")
                message(STATUS "contextfold: ${unused} left empty")
            endif()
        endforeach()
        if(TARGET llama)
            target_compile_options(llama PRIVATE -O1)
            get_target_property(sources llama SOURCES)
            get_target_property(directory llama SOURCE_DIR)
            foreach(source IN LISTS sources)
                if(source MATCHES "llama-(grammar|sampler)\\.cpp$")
                    cmake_path(ABSOLUTE_PATH source BASE_DIRECTORY "${directory}")
                    set_source_files_properties("${source}" TARGET_DIRECTORY llama
                        PROPERTIES COMPILE_OPTIONS "-O3" SKIP_UNITY_BUILD_INCLUSION ON)
                    message(STATUS "contextfold: ${source} kept at -O3")
                endif()
            endforeach()
            message(STATUS "contextfold: llama at -O1")
        endif()
    endfunction()
    cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL contextfold_trim_llama_build)
endif()
