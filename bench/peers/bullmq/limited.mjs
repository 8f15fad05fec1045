// BullMQ's side of bench/peers_bench.py --limited: bench/limited_jobs.py's
// twin (its docstring says the protocol: the arguments, the log's lines
// "KEY START END", the ready file's "ready PID", the producer's JSON line).
//
//   node limited.mjs worker --redis-url URL --log FILE --ready FILE --slots S SCENARIO...
//   node limited.mjs produce --redis-url URL --jobs N SCENARIO...
//
// How BullMQ OSS is told the limits (what it has; per-key limits, "groups",
// are BullMQ Pro's, not open source):
// * a rate R: the worker's `limiter: {max: R, duration: 1000}`, which BullMQ
//   holds in Redis for the queue, across all its workers;
// * at most M running per key: no key in OSS, so a queue per key
//   (`limited-KEY`), each given `setGlobalConcurrency(M)` (held in Redis,
//   across all workers), and each process a Worker on every key's queue with
//   S slots. There is no hand-out across the queues: each Worker takes from
//   its own.
// Every other setting is BullMQ's default.
import fs from "node:fs";
import { parseArgs } from "node:util";
import { Queue, Worker } from "bullmq";

const PRODUCERS = 8; // concurrent add calls, as bench/limited_jobs.py's

const { positionals, values } = parseArgs({
  allowPositionals: true,
  options: {
    "redis-url": { type: "string" },
    log: { type: "string" },
    ready: { type: "string" },
    slots: { type: "string", default: "16" },
    jobs: { type: "string", default: "0" },
    keys: { type: "string" },
    "max-running": { type: "string" },
    rate: { type: "string" },
    sleep: { type: "string" },
  },
});
const role = positionals[0];
const url = new URL(values["redis-url"]);
const connection = {
  host: url.hostname,
  port: Number(url.port),
  db: Number(url.pathname.slice(1) || 0),
  maxRetriesPerRequest: null,
};
const keys = Number(values.keys);
const maxRunning = Number(values["max-running"]);
const rate = Number(values.rate);
const sleepMs = Number(values.sleep) * 1000;
// One queue per key when there is a per-key limit, else one queue.
const queueOf = (key) => (maxRunning ? `limited-${key}` : "limited");
const keyNames = Array.from({ length: keys }, (_, i) => `k${i}`);
const queueNames = [...new Set(keyNames.map(queueOf))];
const now = () => (performance.timeOrigin + performance.now()) / 1000;

async function worker() {
  const log = fs.openSync(values.log, "a");
  const options = { connection, concurrency: Number(values.slots) };
  if (rate) options.limiter = { max: rate, duration: 1000 };
  const workers = queueNames.map(
    (name) =>
      new Worker(
        name,
        async (job) => {
          const started = now();
          await new Promise((resolve) => setTimeout(resolve, sleepMs));
          fs.writeSync(log, `${job.data.key} ${started.toFixed(6)} ${now().toFixed(6)}\n`);
        },
        options,
      ),
  );
  await Promise.all(workers.map((w) => w.waitUntilReady()));
  fs.appendFileSync(values.ready, `ready ${process.pid}\n`);
  process.on("SIGTERM", async () => {
    await Promise.all(workers.map((w) => w.close()));
    process.exit(0);
  });
}

async function produce() {
  const queues = Object.fromEntries(queueNames.map((name) => [name, new Queue(name, { connection })]));
  if (maxRunning) {
    await Promise.all(Object.values(queues).map((q) => q.setGlobalConcurrency(maxRunning)));
  }
  const jobs = Number(values.jobs);
  let next = 0;
  const started = now();
  await Promise.all(
    Array.from({ length: PRODUCERS }, async () => {
      for (let i = next++; i < jobs; i = next++) {
        const key = keyNames[i % keys];
        await queues[queueOf(key)].add("limited", { key, i });
      }
    }),
  );
  const enqueued = now();
  await Promise.all(Object.values(queues).map((q) => q.close()));
  console.log(JSON.stringify({ enqueue_started: started, enqueued }));
}

if (role === "worker") await worker();
else if (role === "produce") await produce();
else {
  console.error(`limited.mjs: worker or produce, not ${role}`);
  process.exit(2);
}
