// SPDX-License-Identifier: MIT
// Files that stand where a checkpoint should and are none: a Git LFS pointer (a clone without
// `git lfs pull`), an HTML or XML page (a download that saved a login or error page), a
// compressed file or an archive (gzip, zstd, xz, bzip2, 7-Zip, tar), an empty file. Every reader
// asks refuse_impostor() first, so that such a file is named for what it is, with what to do,
// instead of failing on the format's first field ("header length 2336927755350992246").
#pragma once

#include <ckptfs/source/byte_source.hpp>

namespace ckptfs {

// What is checked: every kind (a file that has a format of its own, whose first bytes are that
// format's), or only the text ones, long enough never to be the start of raw tensor bytes (a
// DCP .distcp file holds raw bytes: a Git LFS pointer or an HTML page only).
enum class ImpostorCheck : bool { all, text_only };

// Throws Error when the first bytes of `source` (at most 512 are read) are those of one of the
// files above, its message one line without the file's name (the caller prefixes it), saying
// what the file is and what to do:
//   io (2)              a Git LFS pointer ("run git lfs pull"), an HTML or XML page ("download
//                       the file itself again"): the checkpoint's bytes are not there;
//   unsupported (5)     gzip, zstd, xz, bzip2, 7-Zip, a tar archive (not torch 0.1's tar
//                       format, which read_torch() names): "decompress it first (gunzip)";
//   bad_checkpoint (4)  an empty file.
// Returns otherwise; throws what ByteSource::read throws.
void refuse_impostor(const ByteSource& source, ImpostorCheck check = ImpostorCheck::all);

}  // namespace ckptfs
