// SPDX-License-Identifier: MIT
// A Hugging Face model directory's other files (config.json, generation_config.json, the
// tokenizer's files, chat templates, processor configs), served in the views folder beside the
// export as Model::files, so that from_pretrained(MOUNTPOINT/.ckptfs) loads the model as it
// loads the directory:
//
//   add_model_directory_files(model, directory);  // a directory's config.json... now the model's
//
// Which files: only those whose name model_directory_file() accepts, an allow-list of what
// transformers reads beside the weights (a file it does not know, a weight file, a README, a
// Python file of remote code is never served), directly in the directory (not in its
// subfolders), regular files opened beneath it (source/members.hpp: a link that leads out is
// refused, a hub cache snapshot's links to its blobs followed), at most model_file_max_bytes
// each and model_files_max_bytes together. A file refused (a link out, not a regular file, over
// a limit, unreadable) is left out with a note (Model::notes) saying why; a name the model has
// already (the config.json -o names=hf makes of a GGUF file) stays the model's own.
//
// The bytes are the file's, byte for byte, read on first use from the descriptor opened at mount;
// only config.json changes, under -o dtype: its dtype says the dtype the export serves
// (config_with_dtype()).
#pragma once

#include <ckptfs/model/dtype.hpp>
#include <ckptfs/model/model.hpp>
#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/source/directory.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <sys/types.h>

namespace ckptfs {

// The most bytes one file may hold (a large vocabulary's tokenizer.json is 30 MiB) and all of
// them together: the views folder holds them in memory once read.
constexpr std::uint64_t model_file_max_bytes = 64ULL << 20;
constexpr std::uint64_t model_files_max_bytes = 128ULL << 20;
// The most files served (an allow-list of names cannot reach it but through *.jinja templates).
constexpr std::size_t model_files_max_count = 64;

// Whether `name` (a file name, no '/') is one of a model directory's files that transformers
// reads beside its weights: config.json, generation_config.json; tokenizer.json,
// tokenizer_config.json, special_tokens_map.json, added_tokens.json, vocab.json, vocab.txt,
// merges.txt, tokenizer.model, spiece.model, sentencepiece.bpe.model, *.tiktoken; chat templates
// (chat_template.jinja, chat_template.json); preprocessor_config.json, processor_config.json,
// video_preprocessor_config.json. Nothing else (the allow-list): no weight file, index,
// README, license, Python file or training state.
bool model_directory_file(std::string_view name);

// Adds the model directory files of `directory` (as above) to `model.files`, in the order of
// their names, and a note to `model.notes` for each that is left out. `times` and `permissions`,
// when given, take each served file's (the newest times; the permission bits ANDed), so that
// a mount is no less strict than the strictest file it serves. Throws nothing for one file; a
// directory that cannot be listed adds nothing and notes it.
void add_model_directory_files(Model& model, const std::shared_ptr<const Directory>& directory,
                               SourceTimes* times = nullptr, mode_t* permissions = nullptr);

// config.json's text with the value of its "torch_dtype" and "dtype" members set to `dtype`'s
// name ("bfloat16"), in place, every other byte kept: the members of the top-level object, and
// those of its sub-configs (an object member named *_config, such as text_config, but for
// quantization_config, whose dtypes are the quantization's). A member whose value is a string or
// null is set; one of another type is left alone. A text with neither member is returned as it
// is (transformers' dtype="auto" then takes the dtype of the weights, which the export serves
// as `dtype`), and so is a text that is not valid JSON.
std::string config_with_dtype(std::string_view config, DType dtype);

}  // namespace ckptfs
