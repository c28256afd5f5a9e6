// Per-thread workspace slots (see buffers.h).
#include "buffers.h"

#include <algorithm>

namespace zccl::coll::toolkit {

namespace {

struct WorkBuffer {
  std::unique_ptr<uint8_t[]> data;
  size_t capacity = 0;
};
thread_local WorkBuffer t_workspace[kSlotCount];

}  // namespace

uint8_t* workspace_bytes(Slot slot, size_t bytes) {
  WorkBuffer& b = t_workspace[slot];
  if (b.capacity < bytes || !b.data) {
    constexpr size_t kGrain = size_t{1} << 16;  // round up: sizes vary a little between calls
    const size_t cap = std::max(bytes, b.capacity + b.capacity / 4);
    const size_t rounded = (std::max<size_t>(cap, 1) + kGrain - 1) / kGrain * kGrain;
    b.data.reset();  // release before allocating: never hold both
    b.data.reset(new uint8_t[rounded]);
    b.capacity = rounded;
  }
  return b.data.get();
}

}  // namespace zccl::coll::toolkit
