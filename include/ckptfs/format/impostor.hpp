// SPDX-License-Identifier: MIT
// Files that stand where a checkpoint should and are none: a Git LFS pointer (a clone without
// `git lfs pull`), an HTML or XML page (a download that saved a login or error page), a
// compressed file or an archive (gzip, zstd, xz, bzip2, 7-Zip, tar), an empty file. Every reader
// asks once its own format has failed (read_or_name_impostor()), so that such a file is named for
// what it is, with what to do, instead of by the format's first field that failed ("header
// length 2336927755350992246"); never before: a valid file's bytes may hold any text ("ustar" at
// byte 257 from a key named "mustard"), and a valid file is never refused for them.
#pragma once

#include <ckptfs/base/error.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <string_view>

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

// Whether `head` (a file's first 512 bytes or more) is a POSIX tar header: "ustar" at 257 and
// the header checksum at 148 that tar writes (the sum of the header's bytes, as tar and Python's
// tarfile check it): text that merely spells "ustar" there is not one.
bool is_tar_header(std::string_view head);

// After a reader failed on `source` with `failure`: throws what refuse_impostor() throws when the
// file is one of those above and the failure is one about what the file holds (exit codes 3, 4
// and 5); returns otherwise, and when the file's first bytes cannot be read (the reader's own
// error, which the caller rethrows, says more).
void refuse_impostor_after(const ByteSource& source, const Error& failure,
                           ImpostorCheck check = ImpostorCheck::all);

// Runs `read` (a format's reader of `source`) and returns what it returns; when it fails, names
// an impostor as refuse_impostor_after() does, or rethrows its error.
template <class Read>
auto read_or_name_impostor(const ByteSource& source, Read&& read,
                           ImpostorCheck check = ImpostorCheck::all) -> decltype(read()) {
  try {
    return read();
  } catch (const Error& failure) {
    refuse_impostor_after(source, failure, check);
    throw;
  }
}

}  // namespace ckptfs
