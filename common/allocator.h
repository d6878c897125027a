// glibc's allocator, set for a process that moves megabyte messages.
//
// ZeroMQ allocates a buffer for every message it receives and the receiver
// frees it; a frame built for sending (a gradient of 17.5 MB) is allocated
// and freed once per step too. Left alone, glibc maps buffers of a megabyte
// or more fresh and returns them to the kernel on free (or trims them off
// the heap), and each thread that allocates gets an arena of its own whose
// heaps are unmapped whenever they empty; either way every such buffer
// page-faults in new memory, which costs tens of milliseconds per step on a
// virtual machine (README, Scaling; exchange/README.md).
#pragma once

namespace dctrain {

// One arena for every thread, allocations up to 32 MiB on the heap, and up
// to 128 MiB of freed memory kept there, so the buffers of one step are
// reused by the next. Process-wide and idempotent; call it first thing in
// main(), before other threads allocate (an arena made earlier stays).
void tune_allocator();

}  // namespace dctrain
