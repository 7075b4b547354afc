# distribute.pc: the pkg-config file for builds without CMake (README,
# "Building by hand"). Its flags come from what src/CMakeLists.txt links:
# Threads (PUBLIC, -pthread), ISA-L, protobuf-lite, zlib and Boost.Context (PRIVATE: a static
# libdistribute still needs them at the program's link, a shared one does
# not) and, in a build with
# MPI, MPI (PUBLIC: distribute/mpi.h includes <mpi.h>). The library is static
# unless BUILD_SHARED_LIBS, so by default every dependency is in Libs and a
# plain `pkg-config --libs distribute` links; with a shared library ISA-L
# moves to Libs.private.
#
# The paths are written at install time (install(CODE)), so that the file
# names the prefix actually installed to, also with `cmake --install
# --prefix <dir>`.

# Libraries as link flags: /dir/libfoo.so -> -L/dir -lfoo (each -L once);
# flags stay.
function(distribute_pc_link_flags out)
  set(flags "")
  set(dirs "")
  foreach(lib IN LISTS ARGN)
    if(lib MATCHES "^-")
      string(APPEND flags " ${lib}")
    elseif(IS_ABSOLUTE "${lib}")
      get_filename_component(dir "${lib}" DIRECTORY)
      get_filename_component(name "${lib}" NAME_WE)
      string(REGEX REPLACE "^lib" "" name "${name}")
      if(NOT dir IN_LIST dirs)
        list(APPEND dirs "${dir}")
        string(APPEND flags " -L${dir}")
      endif()
      string(APPEND flags " -l${name}")
    elseif(lib)
      string(APPEND flags " -l${lib}")
    endif()
  endforeach()
  set(${out} "${flags}" PARENT_SCOPE)
endfunction()

set(_pc_cflags "")
set(_pc_public_libs "")
if(DISTRIBUTE_WITH_MPI)
  foreach(dir IN LISTS MPI_CXX_INCLUDE_DIRS)
    string(APPEND _pc_cflags " -I${dir}")
  endforeach()
  foreach(def IN LISTS MPI_CXX_COMPILE_DEFINITIONS)
    string(APPEND _pc_cflags " -D${def}")
  endforeach()
  foreach(opt IN LISTS MPI_CXX_COMPILE_OPTIONS)
    string(APPEND _pc_cflags " ${opt}")
  endforeach()
  distribute_pc_link_flags(_pc_mpi_libs ${MPI_CXX_LINK_FLAGS} ${MPI_CXX_LIBRARIES})
  string(APPEND _pc_public_libs "${_pc_mpi_libs}")
endif()
distribute_pc_link_flags(_pc_isal_libs ${ISAL_LIBRARY} ${Protobuf_LITE_LIBRARY_RELEASE} ${ZLIB_LIBRARY_RELEASE})
string(APPEND _pc_isal_libs " -lboost_context")
if(BUILD_SHARED_LIBS)
  set(DISTRIBUTE_PC_LIBS "${_pc_public_libs} -pthread")
  set(DISTRIBUTE_PC_LIBS_PRIVATE "${_pc_isal_libs}")
else()
  set(DISTRIBUTE_PC_LIBS "${_pc_isal_libs}${_pc_public_libs} -pthread")
  set(DISTRIBUTE_PC_LIBS_PRIVATE "")
endif()
set(DISTRIBUTE_PC_CFLAGS "${_pc_cflags}")
foreach(kind IN ITEMS LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${kind}}")
    set(DISTRIBUTE_PC_${kind} "${CMAKE_INSTALL_${kind}}")
  else()
    set(DISTRIBUTE_PC_${kind} "\${prefix}/${CMAKE_INSTALL_${kind}}")
  endif()
endforeach()

# Everything but the prefix now; @CMAKE_INSTALL_PREFIX@ stays for install time.
set(_pc_saved_prefix "${CMAKE_INSTALL_PREFIX}")
set(CMAKE_INSTALL_PREFIX "@CMAKE_INSTALL_PREFIX@")
configure_file(${PROJECT_SOURCE_DIR}/cmake/distribute.pc.in ${PROJECT_BINARY_DIR}/distribute.pc.in @ONLY)
set(CMAKE_INSTALL_PREFIX "${_pc_saved_prefix}")
install(CODE "configure_file(\"${PROJECT_BINARY_DIR}/distribute.pc.in\" \"${PROJECT_BINARY_DIR}/distribute.pc\" @ONLY)")
install(FILES ${PROJECT_BINARY_DIR}/distribute.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
