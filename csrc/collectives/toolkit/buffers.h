// Memory of the CPU collectives: one buffer type (Buffer<T>, Bytes for compressed streams and
// other byte payloads) and one mechanism of per-thread buffers reused across calls (workspace).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace zccl::coll::toolkit {

// An allocator whose value-less construct() leaves memory uninitialised: stream buffers are
// sized by a worst case and written right after, so zero-filling them would cost as much as a
// copy of the data.
template <class T>
struct NoInitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = NoInitAllocator<U>;
  };
  NoInitAllocator() noexcept = default;
  template <class U>
  NoInitAllocator(const NoInitAllocator<U>&) noexcept {}
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    if constexpr (sizeof...(Args) == 0) {
      ::new (static_cast<void*>(p)) U;
    } else {
      ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }
  }
};

// A heap array whose resize() does not zero-fill.
template <class T>
using Buffer = std::vector<T, NoInitAllocator<T>>;
// A compressed stream (or any byte payload) in flight.
using Bytes = Buffer<uint8_t>;

// Per-thread buffers reused across calls. Fresh large allocations cost a page fault per 4 KiB on
// first touch -- on the test VM decoding 16 MB into new memory takes 20 ms instead of 3.5 ms --
// so the algorithms keep their streams and scratch arrays here. Each slot is grown on demand and
// kept (the memory held is the largest message seen per slot: like NCCL's buffers); contents are
// unspecified. One slot per purpose: an algorithm never hands a slot to something it calls while
// it still uses it. The backend runs each group's collectives on one worker thread.
enum Slot : int {
  kSlotSend0, kSlotSend1, kSlotRecv, kSlotScratch, kSlotScratch2,
  kSlotWireOut, kSlotWireIn,  // the Codec's half-precision staging (Config::wire_half)
  kSlotSegments,              // the segmented pipelines' buffers in flight (broadcast, scatter)
  kSlotCount
};
uint8_t* workspace_bytes(Slot slot, size_t bytes);
template <class T>
T* workspace(Slot slot, size_t n) {
  return reinterpret_cast<T*>(workspace_bytes(slot, n * sizeof(T)));
}

}  // namespace zccl::coll::toolkit
