// SPDX-License-Identifier: MIT
// TorchScript class declarations read as data from an archive's code/ records: whether a class
// is a module, and which of its attributes are parameters and buffers. Nothing is executed.
#pragma once

#include <ckptfs/base/hash.hpp>
#include <ckptfs/format/zip/zip_reader.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ckptfs {

// What torch.jit.save's printer writes first in a class of code/<qualifier as a path>.py:
//   class Conv2d(Module):
//     __parameters__ = ["weight", "bias", ]
//     __buffers__ = []
//     weight : Tensor
//     ...
// torch.jit.load makes the attributes listed there the parameters and buffers of the class's
// type; state_dict() lists those that hold a tensor, then recurses into attributes that hold
// modules. data.pkl alone cannot tell them from other tensor attributes.
struct ClassDeclaration {
  bool module = false;                  // declared `class Name(Module):`
  std::vector<std::string> parameters;  // as declared, in order
  std::vector<std::string> buffers;
};

struct CodeLimits {
  // Bytes of code read over all the code records of one archive (after inflating): a bound on
  // time and memory whatever the records claim. torch's own code records are kilobytes.
  std::uint64_t max_code_bytes = 64ull << 20;
  // The longest line kept: a longer one is not a declaration (a __parameters__ line of a module
  // with a hundred thousand parameters is about a megabyte).
  std::size_t max_line = 8u << 20;
};

// The code record, without the archive's prefix, that declares a class of the qualified name
// torch writes in data.pkl: "__torch__.a.b.C" -> "code/__torch__/a/b.py", "__torch__.M" ->
// "code/__torch__.py". Empty when the name is not such a name: at least two segments, the first
// "__torch__", each a non-empty run of [A-Za-z0-9_] (so no path can be made of it).
std::string code_record_of(std::string_view qualified_name);

// Reads the declarations of `classes` (qualified names) from the code records of the archive
// whose records are named `<prefix>/...`. Each record is read at most once and only as far as
// its wanted classes' first lines; stored records are read by offset, deflated ones inflated as
// they are read (zlib, raw deflate), and the text is only matched line by line against the form
// above: `class NAME(BASE):` or `class NAME:` at column 0, then, as the first lines of its body,
// `  __parameters__ = [...]` and `  __buffers__ = [...]` of double-quoted string literals (the
// escapes torch's printer writes: \\ \' \" \a \b \f \n \r \t \v and octal). The first
// declaration of a name in its record counts.
// Returns the classes declared that way. A class is left out (the caller decides without its
// declaration) when its record is missing, encrypted, compressed by another method than
// deflate, its deflate stream is corrupt before the declaration, the declaration lies beyond
// limits.max_code_bytes of code read, or its lines do not have that form.
// Throws only what reading the source throws (Error(io)).
TextMap<ClassDeclaration> read_class_declarations(const ByteSource& source, const ZipArchive& zip,
                                                  std::string_view prefix,
                                                  const std::vector<std::string>& classes,
                                                  const CodeLimits& limits = {});

}  // namespace ckptfs
