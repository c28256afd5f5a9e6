// Waiting with the communicator's deadline, for the collectives' own progress loops (those that
// poll several requests or work in between): one labelled TimeoutError for every algorithm.
#pragma once

#include <functional>

#include "../collectives.h"

namespace zccl::coll::toolkit {

// Polls `done()` (which tests requests and so progresses every transfer) until it holds,
// backing off between polls like Comm::wait. Throws transport::TimeoutError ("zccl: <op>: Timed
// out after ... waiting for <what> (rank <peer>)") past the communicator's timeout.
// `transfer_bytes`: what the awaited transfers move once their peer has posted them; the wait
// polls for the transport's time for them (Comm::polled_transfer_time) before it may sleep.
void wait_until(const Comm& comm, const std::function<bool()>& done, const char* op,
                const char* what, int peer, size_t transfer_bytes = 0);

}  // namespace zccl::coll::toolkit
