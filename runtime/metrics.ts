/**
 * A node's Prometheus metrics (`GET /metrics`), one registry per node: two nodes in one
 * process count apart. The kernel counts envelopes and times invokes; components add gauges
 * read at scrape time (mailbox depth, peers, jobs by status) and observe what they own (run
 * durations, placements).
 *
 * Every label value comes from a bounded set: behaviors this node registered (replies all
 * count as `(reply)`, anything unknown as `(unknown)`), fixed outcomes, executor names. A
 * peer that sends a million behavior names must not make a million series.
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';

/** What became of an envelope at this node. */
export type EnvelopeOutcome = 'ok' | 'error' | 'refused' | 'dead_letter' | 'rejected';

export class NodeMetrics {
  readonly registry = new Registry();
  private readonly envelopes: Counter<'behavior' | 'outcome'>;
  private readonly envelopeChildren = new Map<string, { inc(): void }>();
  private readonly invokeSeconds: Histogram<'kind'>;
  readonly runSeconds: Histogram<'executor' | 'outcome'>;
  readonly placements: Counter<'outcome'>;

  constructor() {
    // The event-loop delay histogram samples on a timer of its own: at prom-client's default
    // (10 ms) an idle node woke ~100 times a second for it (test/cli/idle-node.test.ts).
    collectDefaultMetrics({ register: this.registry, prefix: 'dms_', eventLoopMonitoringPrecision: 1000 });
    // prom-client names three gauges *_total, which Prometheus reserves for counters (promtool
    // refuses them); the handle and request counts they give are of little use here.
    for (const m of this.registry.getMetricsAsArray()) {
      if (m.name.endsWith('_total') && !(m instanceof Counter)) this.registry.removeSingleMetric(m.name);
    }
    this.envelopes = new Counter({
      name: 'dms_envelopes_total',
      help: 'Envelopes that reached this node, by behavior and by what became of them: ok (handled), error (the behavior failed), refused (capability or payload), dead_letter (nobody took it), rejected (expired, bad signature, replayed)',
      labelNames: ['behavior', 'outcome'],
      registers: [this.registry],
    });
    this.invokeSeconds = new Histogram({
      name: 'dms_invoke_duration_seconds',
      help: 'Time from sending an invoke to its reply, by whether the callee was on this node (local) or another (remote)',
      labelNames: ['kind'],
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers: [this.registry],
    });
    this.runSeconds = new Histogram({
      name: 'dms_executor_run_duration_seconds',
      help: 'Duration of job runs from start to end, by executor and outcome (completed, failed)',
      labelNames: ['executor', 'outcome'],
      buckets: [0.01, 0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 14400, 86400],
      registers: [this.registry],
    });
    this.placements = new Counter({
      name: 'dms_placements_total',
      help: 'Placement decisions for jobs: placed (resources granted, the run starts) or waiting (does not fit yet)',
      labelNames: ['outcome'],
      registers: [this.registry],
    });
  }

  /** Counts one envelope; `behavior` must already be a bounded label (see the constants above). */
  envelope(behavior: string, outcome: EnvelopeOutcome): void {
    const key = `${behavior}\0${outcome}`;
    let child = this.envelopeChildren.get(key);
    if (!child) {
      child = this.envelopes.labels(behavior, outcome);
      this.envelopeChildren.set(key, child);
    }
    child.inc();
  }

  invoked(kind: 'local' | 'remote', seconds: number): void {
    this.invokeSeconds.labels(kind).observe(seconds);
  }

  /** A gauge whose values are read when Prometheus scrapes. */
  gauge<L extends string>(name: string, help: string, labelNames: readonly L[], collect: (set: (labels: Partial<Record<L, string>>, value: number) => void) => void | Promise<void>): void {
    new Gauge<L>({
      name,
      help,
      labelNames,
      registers: [this.registry],
      async collect() {
        this.reset();
        await collect((labels, value) => this.set(labels, value));
      },
    });
  }

  /** The text Prometheus scrapes. */
  text(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}
