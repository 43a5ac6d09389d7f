# SPDX-License-Identifier: MIT
# What `cmake --install` puts beside the ckptfs binary (CMakeLists.txt installs ckptfs itself).
# Every destination is a GNUInstallDirs one, relative to CMAKE_INSTALL_PREFIX (DESTDIR works):
#   bin/ckptfs-verify                     a relative symlink to libexec/ckptfs/ckptfs-verify
#   libexec/ckptfs/                       ckptfs-verify, and ckptfs_reference.py, ckptfs_mounts.py
#                                         and ckptfs_safetensors.py, which it imports from its own
#                                         (resolved) directory
#   share/man/man1/ckptfs.1.gz            the man page (packaging/ckptfs.1, gzip -9n)
#   share/bash-completion/completions/ckptfs
#   share/doc/ckptfs/                     README.md, copyright, examples/mnt-model.mount, docs/*.md
#                                         (the README links to them)
#   lib/python3/dist-packages/ckptfs/     the Python package (python/ckptfs) where Debian's python3
#     or lib/python3.X/dist-packages/     finds it: see below
# mount(8) and fstab need no helper of ours: mount.fuse3 (package fuse3) runs `ckptfs SOURCE
# MOUNTPOINT -o OPTIONS` with a fixed PATH, which holds /usr/bin and /usr/local/bin.

include(GNUInstallDirs)

set(CKPTFS_VERIFY_DIR ${CMAKE_INSTALL_LIBEXECDIR}/ckptfs)
install(PROGRAMS ${PROJECT_SOURCE_DIR}/scripts/ckptfs-verify DESTINATION ${CKPTFS_VERIFY_DIR})
install(FILES ${PROJECT_SOURCE_DIR}/scripts/ckptfs_reference.py
  ${PROJECT_SOURCE_DIR}/scripts/ckptfs_mounts.py ${PROJECT_SOURCE_DIR}/scripts/ckptfs_safetensors.py
  DESTINATION ${CKPTFS_VERIFY_DIR})

# bin/ckptfs-verify -> the script, relative so that the installed tree can move (DESTDIR,
# a package); computed at install time, when the final prefix is known.
install(CODE "
  set(bindir \"${CMAKE_INSTALL_BINDIR}\")
  set(target \"${CKPTFS_VERIFY_DIR}/ckptfs-verify\")
  if(NOT IS_ABSOLUTE \"\${bindir}\")
    set(bindir \"\${CMAKE_INSTALL_PREFIX}/\${bindir}\")
  endif()
  if(NOT IS_ABSOLUTE \"\${target}\")
    set(target \"\${CMAKE_INSTALL_PREFIX}/\${target}\")
  endif()
  file(RELATIVE_PATH link \"\${bindir}\" \"\${target}\")
  file(MAKE_DIRECTORY \"\$ENV{DESTDIR}\${bindir}\")
  message(STATUS \"Installing: \$ENV{DESTDIR}\${bindir}/ckptfs-verify -> \${link}\")
  file(CREATE_LINK \"\${link}\" \"\$ENV{DESTDIR}\${bindir}/ckptfs-verify\" SYMBOLIC)
  list(APPEND CMAKE_INSTALL_MANIFEST_FILES \"\$ENV{DESTDIR}\${bindir}/ckptfs-verify\")
")

# The man page, compressed as Debian wants it (man reads either).
find_program(CKPTFS_GZIP gzip)
mark_as_advanced(CKPTFS_GZIP)
set(man_source ${PROJECT_SOURCE_DIR}/packaging/ckptfs.1)
if(CKPTFS_GZIP)
  set(man_page ${PROJECT_BINARY_DIR}/packaging/ckptfs.1.gz)
  add_custom_command(OUTPUT ${man_page}
    COMMAND ${CMAKE_COMMAND} -E copy ${man_source} ${PROJECT_BINARY_DIR}/packaging/ckptfs.1
    COMMAND ${CKPTFS_GZIP} -9nf ${PROJECT_BINARY_DIR}/packaging/ckptfs.1
    DEPENDS ${man_source} COMMENT "Compressing the man page" VERBATIM)
  add_custom_target(ckptfs_man ALL DEPENDS ${man_page})
else()
  set(man_page ${man_source})
endif()
install(FILES ${man_page} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)

install(FILES ${PROJECT_SOURCE_DIR}/packaging/ckptfs.bash-completion
  DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions RENAME ckptfs)

install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/packaging/copyright
  DESTINATION ${CMAKE_INSTALL_DOCDIR})
# The README links to docs/: installed beside it, so that its links work where it is read.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs
  FILES_MATCHING PATTERN "*.md")
install(FILES ${PROJECT_SOURCE_DIR}/packaging/mnt-model.mount
  DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)

# The Python package, where Debian's python3 finds it. The directory depends on the prefix, so it
# is chosen when installing (cpack installs into a staging directory ending in /usr):
#   - a prefix whose last component is usr (/usr, DESTDIR/usr, the .deb): lib/python3/dist-packages,
#     the directory Debian's python3 searches for packaged modules, whatever its version;
#   - any other (the default /usr/local): lib/python3.X/dist-packages, the one Debian's python3
#     searches under /usr/local (X: the minor version of /usr/bin/python3, asked here).
# CKPTFS_PYTHON_DIR, relative to the prefix or absolute, overrides both. Not byte-compiled.
set(CKPTFS_PYTHON_DIR "" CACHE STRING
  "Where cmake --install puts the Python package (default: Debian's python3 directory)")
find_program(CKPTFS_DEBIAN_PYTHON3 python3 PATHS /usr/bin NO_DEFAULT_PATH)
find_program(CKPTFS_DEBIAN_PYTHON3 python3)
mark_as_advanced(CKPTFS_DEBIAN_PYTHON3)
set(ckptfs_python_version 3)
if(CKPTFS_DEBIAN_PYTHON3)
  execute_process(COMMAND ${CKPTFS_DEBIAN_PYTHON3} -c
    "import sys; print('%d.%d' % sys.version_info[:2])"
    OUTPUT_VARIABLE ckptfs_python_version OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE ckptfs_python_failed)
  if(ckptfs_python_failed)
    set(ckptfs_python_version 3)
  endif()
endif()
file(GLOB ckptfs_python_files CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/python/ckptfs/*.py)
install(CODE "
  set(python_dir \"${CKPTFS_PYTHON_DIR}\")
  if(python_dir STREQUAL \"\")
    get_filename_component(last \"\${CMAKE_INSTALL_PREFIX}\" NAME)
    if(last STREQUAL \"usr\")
      set(python_dir lib/python3/dist-packages)
    else()
      set(python_dir lib/python${ckptfs_python_version}/dist-packages)
    endif()
  endif()
  if(NOT IS_ABSOLUTE \"\${python_dir}\")
    set(python_dir \"\${CMAKE_INSTALL_PREFIX}/\${python_dir}\")
  endif()
  # (file(INSTALL) puts DESTDIR in front itself, as install() does)
  file(INSTALL DESTINATION \"\${python_dir}/ckptfs\" TYPE FILE FILES ${ckptfs_python_files})
")
