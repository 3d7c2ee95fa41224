/**
 * How much freed memory glibc's malloc hands back to the kernel (issues 23–25: bytes moved per
 * second and CPU per MiB).
 *
 * A node moving bulk data (a tunnel, a job's output block by block, the stream under both)
 * allocates a buffer for every socket read, every Noise message and every frame, and frees them
 * in batches when V8 collects them. glibc gives the top of its heap back to the kernel whenever
 * more than its trim threshold is free there (128 KiB at first), so after each batch the heap
 * shrinks by megabytes and the next reads grow it again, page by page: every 4 KiB page of the
 * data then costs a page fault and the kernel's zeroing of it. Measured on this project's
 * machine (a virtual machine, where a fault is dear) during bench:tunnel: 80,000–140,000 faults
 * per process per 5 s and ~400 `brk` calls a second; with the threshold raised, 200–300
 * faults, and in bench:tunnel runs of the same hour the raw libp2p stream 31–55 % faster, the
 * tunnel 14–36 % (bench/RESULTS.md).
 *
 * glibc raises its thresholds itself (mallopt(3), "dynamic mmap threshold"): when a block it
 * had mapped is freed, its mmap threshold becomes that block's size, up to 32 MiB on 64-bit,
 * and its trim threshold twice that. Node offers no mallopt(); so a process that serves makes
 * and drops one block just under 32 MiB, and glibc, once V8 collects it, keeps up to 64 MiB of
 * freed heap for the next reads instead of returning it. `calloc` maps that block without
 * touching its pages: it costs two system calls and no resident memory. Under another C
 * library (musl, macOS), which has no such thresholds, it is only that. The price is memory a
 * node that moved data keeps afterwards: at most the trim threshold's 64 MiB of heap it had used
 * anyway.
 */

/** Just under glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit (32 MiB), chunk header and page rounding included. */
export const RAISING_BLOCK_BYTES = 32 * 1024 * 1024 - 64 * 1024;

/** Kept on the global object: the loader and the program are bundled apart, each with its own copy. */
const STATE = Symbol.for('dms.malloc-thresholds');
const state = ((globalThis as Record<symbol, unknown>)[STATE] ??= { raised: false }) as { raised: boolean };

/**
 * Makes and drops the block that raises glibc's mmap and trim thresholds (once per process).
 * They rise when V8 next collects it: soon on a node that works, maybe not for a while on an
 * idle one, which has little garbage to keep.
 */
export function raiseMallocThresholds(): void {
  if (state.raised) return;
  state.raised = true;
  void new ArrayBuffer(RAISING_BLOCK_BYTES);
}
