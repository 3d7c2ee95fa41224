// The subset of autocannon's API the benches use (the package ships no types).
declare module 'autocannon' {
  export interface Request {
    method?: string;
    path?: string;
    body?: string | Buffer;
    headers?: Record<string, string>;
  }
  export interface Options {
    url: string;
    connections?: number;
    duration?: number;
    amount?: number;
    pipelining?: number;
    method?: string;
    body?: string;
    headers?: Record<string, string>;
    requests?: Array<Request & { setupRequest?: (req: Request, context: Record<string, unknown>) => Request }>;
  }
  export interface Histogram {
    average: number;
    mean: number;
    p50: number;
    p90: number;
    p99: number;
    max: number;
  }
  export interface Result {
    requests: Histogram & { total: number; sent: number };
    latency: Histogram;
    errors: number;
    timeouts: number;
    non2xx: number;
    duration: number;
    '2xx': number;
  }
  function autocannon(opts: Options): Promise<Result>;
  export default autocannon;
}
