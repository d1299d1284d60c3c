// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the memory owners share: the checks before an allocation, the typed
// out-of-memory error, and the words their messages are made of.
#include <drvshim/context.hpp>

#include <cstddef>
#include <string>

namespace drvshim::detail {

// "1048576 bytes (1.00 MiB)", or "64 bytes" below a MiB.
std::string bytes_text(std::size_t n);
// "device 0, context 0x..."
std::string context_text(const ContextRef& ctx);
// Refuses a zero-byte allocation before the driver (which answers CUDA_ERROR_INVALID_VALUE).
void require_bytes(const char* api, std::size_t bytes);
// What every owner's as<T>() checks before it makes a view of the whole
// allocation: the owner holds memory (`empty` says otherwise) and its size is
// a multiple of the element size. Throws InvalidArgumentError from `api`.
void check_whole_view(const char* api, const char* empty, bool held, std::size_t bytes, std::size_t element_size);
// Throws the typed out-of-memory error, asking the device how much it has left
// (`device_memory`; host allocations report 0).
[[noreturn]] void raise_out_of_memory(const ContextRef& ctx, const char* api, std::string objects, std::size_t bytes,
                                      bool device_memory);

}  // namespace drvshim::detail
