// The job queue: Postgres is the truth (agent_runs), the queue is the doorbell.
// Two backends behind this interface: Redis (REDIS_URL set) and Postgres itself.
import type { Job } from '../../core/job.ts';

export interface Delivery {
  /** The message as it arrived (JSON text); parse with parseRawJob. */
  raw: string;
  /** Acknowledge after the run is claimed in Postgres (or the job dead-lettered or refused). */
  ack(): Promise<void>;
  /**
   * Gives the message back for a later try, after a transient failure before the claim (the
   * database unreachable): Redis puts it back at the head of the queue; Postgres lets the
   * visibility timeout bring the run back. Optional for stand-ins; the queues implement it.
   */
  release?(): Promise<void>;
}

export interface JobQueue {
  readonly backend: 'redis' | 'postgres';
  /** Makes a recorded run's job visible to workers. Call only after recordRun committed. */
  enqueue(job: Job): Promise<void>;
  /** Waits up to timeoutMs for a job; null on timeout or abort. */
  take(options: { timeoutMs: number; signal?: AbortSignal }): Promise<Delivery | null>;
  /** Records a job that cannot be run, with the reason; the consumer goes on. */
  deadLetter(raw: string, reason: string, ids?: { workspaceId?: string; jobId?: string }): Promise<void>;
  close(): Promise<void>;
}
