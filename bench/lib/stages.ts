import type { StageFigure } from '../../runtime/stage-timings.js';

/** A node's stage timings (`GET /api/v1/dev/stages`; the node runs with DMS_STAGE_TIMINGS=1). */
export async function stagesOf(url: string): Promise<StageFigure[]> {
  const res = await fetch(`${url}/api/v1/dev/stages`);
  if (!res.ok) throw new Error(`GET /api/v1/dev/stages: HTTP ${res.status} ${await res.text()}`);
  return (await res.json()) as StageFigure[];
}

export async function resetStages(url: string): Promise<void> {
  const res = await fetch(`${url}/api/v1/dev/stages`, { method: 'DELETE' });
  if (!res.ok) throw new Error(`DELETE /api/v1/dev/stages: HTTP ${res.status} ${await res.text()}`);
}

export function printStages(title: string, figures: StageFigure[]): void {
  console.log(title);
  console.log(`  ${'stage'.padEnd(18)}${'count'.padStart(8)}${'mean ms'.padStart(10)}${'p50 ms'.padStart(10)}${'p99 ms'.padStart(10)}`);
  for (const f of figures) {
    console.log(`  ${f.stage.padEnd(18)}${String(f.count).padStart(8)}${f.mean_ms.toFixed(3).padStart(10)}${f.p50_ms.toFixed(3).padStart(10)}${f.p99_ms.toFixed(3).padStart(10)}`);
  }
}

export const meanOf = (figures: StageFigure[], stage: StageFigure['stage']): number => figures.find((f) => f.stage === stage)?.mean_ms ?? 0;
