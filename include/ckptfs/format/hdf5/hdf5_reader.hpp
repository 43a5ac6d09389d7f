// SPDX-License-Identifier: MIT
// HDF5 files read into a Model by a bounded reader of ckptfs's own (never libhdf5): Keras's
// .weights.h5 and Keras 2's .h5, any h5py file, and a .keras archive's model.weights.h5. Every
// dataset is an entry keyed by its path with '/' written '.' ("layers.dense.vars.0",
// "model_weights.dense.dense.kernel:0"); contiguous and compact datasets are ranges of the file,
// chunked ones are assembled from their chunks, each decoded on read (source/chunk_source.hpp).
#pragma once

#include <ckptfs/format/hdf5/hdf5_limits.hpp>
#include <ckptfs/format/zip/zip_reader.hpp>
#include <ckptfs/model/model.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ckptfs {

// A model read from HDF5 with the sources its reader made over the file: Model::sources[i + 1]
// is sources[i] (a chunked dataset's decoded chunks, a .keras archive's deflated member
// inflated), each reading the file's source, which must outlive them.
struct Hdf5Model {
  Model model;
  std::vector<std::unique_ptr<ByteSource>> sources;
};

// Whether the source starts with HDF5's signature, or has it at 512, 1024, 2048... (the
// superblock after a user block), within its first 64 KiB.
bool looks_like_hdf5(const ByteSource& source);

// Reads an HDF5 file (Format::hdf5; Model::sources[0] is `source_name`). Every dataset reached
// from the root group by hard links is an entry, in each group's name order (digits compared as
// numbers: "vars.2" before "vars.10"); a dataset linked twice is one tensor with two keys, a
// group linked twice is read once (soft and external links, and committed datatypes, are not
// entries). A dataset ckptfs cannot serve is a broken tensor saying why (a string, compound or
// variable-length type, a filter other than deflate, shuffle and Fletcher-32, external or
// virtual storage, a chunk index that is corrupt or past the file); a dataset without data (a
// null dataspace) is the value null. The root group's string attributes (Keras 2's
// keras_version, backend, model_config...) are Model::metadata. Model::tensor_notes holds
// each tensor's "hdf5" fields for meta.json: its dataset's path, layout, chunk shape, filters and
// byte order. Structures are read with explicit stacks, each at most once, every address checked
// against the file's size and its structure's checksum where it has one. Throws Error:
// bad_checkpoint for a file whose structure is invalid (the superblock, a group, an object
// header), "the file looks truncated" when it is cut short; unsupported past `limits`.
Hdf5Model read_hdf5(const ByteSource& source, const std::string& source_name,
                    const Hdf5Limits& limits = {});

// Reads a .keras archive (Keras 3's model.save(): a zip of model.weights.h5, config.json and
// metadata.json; Format::keras): model.weights.h5 as read_hdf5() reads it, a range of the
// archive when stored (Keras stores it), else inflated on read (a source of its own);
// config.json and metadata.json, and any other member at the archive's top level whose name
// ends in .json, are Model::extra_files, served in .ckptfs/. Throws what ZipArchive throws,
// Error(bad_checkpoint) for an archive without model.weights.h5 (one with model.weights.npz is
// unsupported), and what read_hdf5() throws, naming the member.
Hdf5Model read_keras(const ByteSource& source, const std::string& source_name,
                     const Hdf5Limits& limits = {});

// Whether a zip archive is a .keras one: its members include model.weights.h5 (or .npz) and
// config.json.
bool looks_like_keras(const ByteSource& source);

}  // namespace ckptfs
