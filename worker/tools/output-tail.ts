// Keeps the last `capBytes` of a stream (a command's failure is usually at the end of its output),
// holding at most about one chunk more than the cap, however much the command prints.

export class OutputTail {
  private chunks: Buffer[] = [];
  private held = 0;
  private dropped = false;

  constructor(private readonly capBytes: number) {}

  push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.held += chunk.length;
    while (this.chunks.length > 1 && this.held - this.chunks[0]!.length >= this.capBytes) {
      this.held -= this.chunks.shift()!.length;
      this.dropped = true;
    }
  }

  get truncated(): boolean {
    return this.dropped || this.held > this.capBytes;
  }

  /** The kept tail as text; a UTF-8 character cut at the start of the tail is skipped, not shown as U+FFFD. */
  text(): string {
    let tail = Buffer.concat(this.chunks);
    if (this.truncated) {
      if (tail.length > this.capBytes) tail = tail.subarray(tail.length - this.capBytes);
      let skip = 0;
      while (skip < 3 && skip < tail.length && (tail[skip]! & 0xc0) === 0x80) skip++;
      tail = tail.subarray(skip);
    }
    return tail.toString('utf8');
  }
}
