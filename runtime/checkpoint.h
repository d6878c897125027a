// Checkpoints: the run's state at a step boundary (config, next step, ledger,
// counters, and the replica's parameters, buffers and optimizer state),
// written atomically (temp file, fsync, rename) as RUN_DIR/checkpoint.bin.
//
// File: "DCTRCKPT" magic, u32 format version, u64 header length, the
// CheckpointHeader (proto/checkpoint.proto), zero padding to a multiple of 4
// bytes, each tensor as raw float32, then a u64 checksum of everything before.
// Format 2 holds the ledger as a LedgerState message and the run config with
// its kinds as enums; a format 1 file (earlier builds) is refused, naming the
// format and what to do.
#pragma once

#include <filesystem>
#include <string>

#include "common/files.h"
#include "data/dataset.h"
#include "proto/checkpoint.pb.h"
#include "runtime/replica.h"

namespace dctrain {

std::filesystem::path checkpoint_path(const std::filesystem::path& run_dir);

// Writes header + the replica's state views to `path`.tmp, synced, and
// leaves it to the caller to put in place (PendingFile::put_in_place).
PendingFile write_checkpoint(const std::filesystem::path& path, v1::CheckpointHeader header,
                             Replica& replica);
// write_checkpoint, put in place at once.
void save_checkpoint(const std::filesystem::path& path, v1::CheckpointHeader header,
                     Replica& replica);

// Reads the header and fills the replica's state. Throws std::runtime_error
// naming the file and the problem (missing, truncated, corrupt, other model).
v1::CheckpointHeader load_checkpoint_header(const std::filesystem::path& path);
void load_checkpoint_state(const std::filesystem::path& path, Replica& replica);

// The sizes the model took from its data, as a checkpoint keeps them
// (CheckpointHeader.model_input), and back.
v1::ModelInput model_input_of(const SampleShape& shape);
SampleShape sample_shape_of(const v1::ModelInput& input);

}  // namespace dctrain
