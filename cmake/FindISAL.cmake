# FindISAL: Intel's ISA-L (Debian: libisal-dev), whose crc32_iscsi is the
# CRC32C that checkpoints use. Defines the imported target ISAL::ISAL.
# Installed with the package: distributeConfig.cmake finds it again for
# consumers, because a static libdistribute needs -lisal at their link.
find_path(ISAL_INCLUDE_DIR NAMES isa-l/crc.h)
find_library(ISAL_LIBRARY NAMES isal)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(ISAL REQUIRED_VARS ISAL_LIBRARY ISAL_INCLUDE_DIR)
if(ISAL_FOUND AND NOT TARGET ISAL::ISAL)
  add_library(ISAL::ISAL UNKNOWN IMPORTED)
  set_target_properties(ISAL::ISAL PROPERTIES
    IMPORTED_LOCATION "${ISAL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${ISAL_INCLUDE_DIR}")
endif()
mark_as_advanced(ISAL_INCLUDE_DIR ISAL_LIBRARY)
