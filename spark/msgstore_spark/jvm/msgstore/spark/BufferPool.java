package msgstore.spark;

import java.util.Iterator;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Fetch answers' arrays, kept for the next task of this executor. An answer is megabytes, which
 * G1 allocates as a humongous object, and each such allocation started a concurrent collection
 * cycle: 5-13 ms pauses and marking threads on every scan of a two-core machine. Reused arrays
 * are allocated once per executor.
 */
final class BufferPool {
  private static final long MAX_POOLED = 128L << 20;
  private static final ConcurrentLinkedQueue<byte[]> FREE = new ConcurrentLinkedQueue<>();
  private static final AtomicLong POOLED = new AtomicLong();

  private BufferPool() {}

  /** An array of at least ``size`` bytes. */
  static byte[] take(int size) {
    for (Iterator<byte[]> it = FREE.iterator(); it.hasNext(); ) {
      byte[] b = it.next();
      if (b.length >= size && FREE.remove(b)) {
        POOLED.addAndGet(-b.length);
        return b;
      }
    }
    // rounded up to 1 MiB so that slightly larger answers find an array next time
    long rounded = ((long) size + (1 << 20) - 1) & ~((1L << 20) - 1);
    return new byte[(int) Math.min(Integer.MAX_VALUE - 8, Math.max(rounded, size))];
  }

  /** Back for reuse, unless the pool already holds enough. */
  static void give(byte[] b) {
    if (POOLED.addAndGet(b.length) <= MAX_POOLED) {
      FREE.offer(b);
    } else {
      POOLED.addAndGet(-b.length);
    }
  }
}
