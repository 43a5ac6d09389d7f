// SPDX-License-Identifier: MIT
// The naming rule moved to base/names.hpp, where the readers of split and RFC directories
// (format layer) reach it too; this keeps the view's include working. New code includes
// <ckptfs/base/names.hpp>.
#pragma once

#include <ckptfs/base/names.hpp>
