# distribute_set_warnings(target): the project's warning set. Presets turn
# warnings into errors (CMAKE_COMPILE_WARNING_AS_ERROR).
function(distribute_set_warnings target)
  target_compile_options(${target} PRIVATE
    -Wall -Wextra -Wpedantic -Wconversion -Wsign-conversion -Wshadow
    -Wnon-virtual-dtor -Wold-style-cast -Woverloaded-virtual
    # g++ 12 reports false -Wrestrict overlaps inside std::string's operator+
    # at -O2 and above (GCC bug 105329); clang has no such warning (and
    # rejects the option).
    $<$<CXX_COMPILER_ID:GNU>:-Wno-restrict>)
endfunction()
