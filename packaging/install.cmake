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
