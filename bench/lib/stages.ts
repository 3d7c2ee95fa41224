import { resetStageTimings, stageTimings } from '../../client/dev.js';
import { RestClient } from '../../client/rest.js';
import type { StageFigure } from '../../runtime/stage-timings.js';

/** A node's stage timings (the node runs with DMS_STAGE_TIMINGS=1), through the client. */
export const stagesOf = (url: string): Promise<StageFigure[]> => stageTimings(new RestClient({ url }));

export const resetStages = (url: string): Promise<void> => resetStageTimings(new RestClient({ url }));

export function printStages(title: string, figures: StageFigure[]): void {
  console.log(title);
  console.log(`  ${'stage'.padEnd(18)}${'count'.padStart(8)}${'mean ms'.padStart(10)}${'p50 ms'.padStart(10)}${'p99 ms'.padStart(10)}`);
  for (const f of figures) {
    console.log(`  ${f.stage.padEnd(18)}${String(f.count).padStart(8)}${f.mean_ms.toFixed(3).padStart(10)}${f.p50_ms.toFixed(3).padStart(10)}${f.p99_ms.toFixed(3).padStart(10)}`);
  }
}

export const meanOf = (figures: StageFigure[], stage: StageFigure['stage']): number => figures.find((f) => f.stage === stage)?.mean_ms ?? 0;
