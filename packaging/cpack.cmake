# SPDX-License-Identifier: MIT
# The Debian package, built by scripts/package.sh (cpack -G DEB over the build tree):
# ckptfs_VERSION_ARCH.deb, installed under /usr with `apt-get install ./ckptfs_*.deb`.
# Its contents are what packaging/install.cmake and CMakeLists.txt install, the binaries
# stripped. Depends: fuse3 (fusermount3, mount.fuse3), libcurl4 (remote checkpoints: loaded with
# dlopen, so dpkg-shlibdeps does not see it; the version CMakeLists.txt asks), and the shared
# libraries the binary links, computed by dpkg-shlibdeps (libc6, libfmt9, libfuse3-3, libgcc-s1,
# libstdc++6, zlib1g).
# ckptfs-verify needs python3 with numpy and torch, the Python package (in
# /usr/lib/python3/dist-packages) python3 with numpy: Recommends python3, Suggests the others
# (python3-torch is large, and ckptfs itself never needs it).

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ckptfs)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR ckptfs)
set(CKPTFS_MAINTAINER "ckptfs maintainers <maintainers@users.noreply.a-seed-26c5e8ca.example>"
  CACHE STRING "The Maintainer field of the Debian package")
set(CPACK_PACKAGE_CONTACT "${CKPTFS_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "mount a PyTorch checkpoint as a read-only filesystem")
# The extended description; CPack puts the summary above it.
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
  "ckptfs shows every key of a PyTorch checkpoint (.pth, .pt, .ckpt, .bin
written by torch.save) as a directory holding the tensor's raw data, a meta.json
and a tensor.npy. Every read is an offset read inside the checkpoint file:
nothing is converted or loaded whole, and the pickle inside the checkpoint is
never executed.
.
Mount with `ckptfs model.pth /mnt/model`, from /etc/fstab (type fuse.ckptfs) or
from a systemd mount unit. ckptfs-verify compares a mount with torch.load.
`import ckptfs` (python3, numpy) opens any checkpoint as a lazy state dict.")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # ckptfs_0.1.0_amd64.deb
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)  # needs dpkg-shlibdeps (dpkg-dev) and file
set(CPACK_DEBIAN_PACKAGE_DEPENDS "fuse3, libcurl4 (>= ${CKPTFS_CURL_MINIMUM})")  # shlibdeps' list is appended
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "python3-numpy, python3-torch")
# prerm removes the __pycache__ that running ckptfs-verify as root leaves in libexec/ckptfs.
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/packaging/debian/prerm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
