// SPDX-License-Identifier: MIT
// The tokenizer files of -o names=hf: the tokenizer transformers' GGUF loader makes of a file's
// BPE vocabulary, as tokenizer.json (tokenizers' serialization) and tokenizer_config.json, so
// that AutoTokenizer.from_pretrained(MNT/.ckptfs) encodes as AutoTokenizer.from_pretrained(dir,
// gguf_file=F) does.
#pragma once

#include "gguf_hf_tables.hpp"

#include <ckptfs/model/model.hpp>

#include <string>

namespace ckptfs::gguf_hf {

// Why the files are not made for `model` (a GGUF model of `architecture`): no rule for the
// architecture (the loader makes no tokenizer of it, or one the probes cannot tell), a
// vocabulary that is not BPE ("gpt2"), tokens or merges missing or not UTF-8, a merge that is no
// pair; "" when they are.
std::string why_no_tokenizer(const Model& model, const Architecture& architecture);

// tokenizers' JSON of the loader's tokenizer: the rule's, with the added tokens it says (the
// file's CONTROL tokens or special ids, then its own, at their ids in the vocabulary or after
// it), the file's tokens as the vocabulary (a token twice: its last id) and its merges as pairs.
// "" when why_no_tokenizer() says why not.
std::string tokenizer_json(const Model& model, const Tokenizer& rule);

// {"tokenizer_class": "TokenizersBackend", "bos_token"... as the rule says (null when the file
// has no such id), "chat_template" when the file has one}.
std::string tokenizer_config_json(const Model& model, const Tokenizer& rule);

}  // namespace ckptfs::gguf_hf
