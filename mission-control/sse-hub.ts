// One LISTEN echodo_changes connection for the whole server, fanned out to SSE clients.
// Each client sees only its workspace's notifications (admin fleet clients see all). The
// trigger's payload carries ids only, so forwarding it verbatim leaks nothing else.
import type { Sql } from 'postgres';

export const CHANGES_CHANNEL = 'echodo_changes';

export interface ChangeNotice {
  table: string;
  workspaceId: string;
  convoyId: string;
  agentRunId: string | null;
}

export interface Subscriber {
  /** null: every workspace (the admin fleet feed). */
  workspaceId: string | null;
  /** A notification for this subscriber: the raw payload text, forwarded as the SSE data. */
  change(payload: string): void;
  /** The LISTEN connection came back after a drop: changes may have been missed. */
  resync(): void;
  /** The hub is closing: end the stream. */
  end(): void;
}

export class ChangeHub {
  private readonly subscribers = new Set<Subscriber>();
  private unlisten: (() => Promise<void>) | undefined;
  private listening = 0;

  /** Starts the one LISTEN; resolves once Postgres has accepted it. */
  async start(sql: Sql): Promise<void> {
    const meta = await sql.listen(
      CHANGES_CHANNEL,
      (payload) => this.dispatch(payload),
      () => {
        // Called on the first LISTEN and again after every reconnect.
        if (this.listening++ > 0) for (const s of this.subscribers) s.resync();
      },
    );
    this.unlisten = meta.unlisten;
  }

  subscribe(subscriber: Subscriber): () => void {
    this.subscribers.add(subscriber);
    return () => this.subscribers.delete(subscriber);
  }

  get size(): number {
    return this.subscribers.size;
  }

  dispatch(payload: string): void {
    let notice: ChangeNotice;
    try {
      notice = JSON.parse(payload) as ChangeNotice;
    } catch {
      return; // not ours: someone else NOTIFYing on the channel
    }
    if (typeof notice?.workspaceId !== 'string') return;
    for (const s of this.subscribers) {
      if (s.workspaceId === null || s.workspaceId === notice.workspaceId) s.change(payload);
    }
  }

  async close(): Promise<void> {
    for (const s of [...this.subscribers]) s.end();
    this.subscribers.clear();
    await this.unlisten?.().catch(() => {});
    this.unlisten = undefined;
  }
}
