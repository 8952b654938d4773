// Checks the event batch format of `bookline serve --event-batches` with a
// NATS client written by others (nats.js, JetStream API), from the docs
// alone: docs/protocol.md sections 2, 4, 5 and 11 and docs/schema. It
// publishes calendar.upsert and booking.create commands the way an importer
// does, reads the batches of BOOKLINE_EVT with an ordered consumer and checks
// each batch's headers and lines against what the docs promise.
//
// usage: node evt-batch.mjs <nats-url> <docs/schema dir>
// Exits 1 with one line per mismatch.
import { connect, headers, StringCodec } from 'nats';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const [natsURL, schemaDir] = process.argv.slice(2);
if (!natsURL || !schemaDir) {
  console.error('usage: node evt-batch.mjs <nats-url> <schema dir>');
  process.exit(2);
}
const DEADLINE_MS = 15000;
// Section 2: a stream the embedded server creates has 2 partitions, and
// the server places bookline.cmd.<cal> in FNV-1a-32(cal) mod N.
const PARTITIONS = 2;

const problems = [];
const fail = (msg) => { problems.push(msg); };
const sc = StringCodec();

function fnv32a(s) {
  let h = 0x811c9dc5;
  for (const c of Buffer.from(s, 'utf8')) { h ^= c; h = Math.imul(h, 0x01000193) >>> 0; }
  return h;
}
function fnv64aHex(s) {
  let h = 0xcbf29ce484222325n;
  for (const c of Buffer.from(s, 'utf8')) { h ^= BigInt(c); h = (h * 0x100000001b3n) & 0xffffffffffffffffn; }
  return h.toString(16).padStart(16, '0');
}
// "BOOKLINE_CMD@<RFC 3339 with nanoseconds, UTC>" -> Unix nanoseconds, as
// the <created> of the ids (section 4).
function createdNanos(stream) {
  const m = /^BOOKLINE_CMD@(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z$/.exec(stream);
  if (!m) return null;
  return (BigInt(Date.parse(m[1] + 'Z')) * 1000000n + BigInt((m[2] || '').padEnd(9, '0'))).toString();
}

// The docs' own example (section 11) must agree with the rules above, or
// the check below would test the wrong thing.
if (fnv64aHex('4\n5\n') !== '015cafd8fee5b690' || createdNanos('BOOKLINE_CMD@2026-11-29T08:59:58.5Z') !== '1795942798500000000'
  || fnv32a('alice') % PARTITIONS !== 1) {
  console.error('evt-batch: the example batch of docs/protocol.md section 11 does not follow section 4\'s id rules');
  process.exit(1);
}

// --- schemas (section 5: the files refer to each other by relative name)
const ajv = new Ajv2020({ strict: true, allErrors: true });
addFormats(ajv);
for (const f of ['reply', 'event', 'command', 'event-batch-line']) {
  ajv.addSchema(JSON.parse(readFileSync(join(schemaDir, `${f}.schema.json`), 'utf8')));
}
const validLine = ajv.getSchema('event-batch-line.schema.json');
const validEvent = ajv.getSchema('event.schema.json');
const validCommand = ajv.getSchema('command.schema.json');

// --- the commands: two calendars in each partition
const cals = ['alice', 'bob', 'carol', 'dave'];
const parts = new Set(cals.map((c) => fnv32a(c) % PARTITIONS));
if (parts.size !== PARTITIONS) {
  console.error('evt-batch: the calendars do not cover every partition');
  process.exit(1);
}
// Request ids derived from the content, so that <calendar_id>:<request_id>
// is a sufficient Nats-Msg-Id (section 4).
function command(type, cal, body) {
  const c = { v: 1, type, calendar_id: cal, ...body };
  c.request_id = 'nj.' + createHash('sha256').update(JSON.stringify(c)).digest('hex').slice(0, 32);
  return c;
}
const plan = []; // {cmd, expect: 'accepted' | code}
cals.forEach((cal, i) => {
  const day = `2030-01-${String(10 + i).padStart(2, '0')}`;
  plan.push({ cmd: command('calendar.upsert', cal, { calendar: { name: `nats.js ${cal}`, timezone: 'UTC' } }), expect: 'accepted' });
  plan.push({ cmd: command('booking.create', cal, { booking: { start: `${day}T10:00:00Z`, end: `${day}T11:00:00Z`, customer: 'Bob', metadata: { src: 'nats.js' } } }), expect: 'accepted' });
  plan.push({ cmd: command('booking.create', cal, { booking: { start: `${day}T10:30:00Z`, end: `${day}T11:30:00Z`, customer: 'Eve' } }), expect: 'slot_taken' });
  // touches the first booking: [10:00,11:00) and [11:00,12:00) do not overlap
  plan.push({ cmd: command('booking.create', cal, { booking: { start: `${day}T11:00:00Z`, end: `${day}T12:00:00Z`, customer: 'Carl' } }), expect: 'accepted' });
});
const twiceIdx = plan.length - 1; // published a second time, same Nats-Msg-Id

const nc = await connect({ servers: natsURL, name: 'bookline-contract-natsjs', timeout: 5000 });
const js = nc.jetstream();
const jsm = await nc.jetstreamManager();
try {
  // --- publish, as an importer (section 4's headers)
  const bySeq = new Map(); // BOOKLINE_CMD seq -> plan entry
  const publish = async (p) => {
    const { cmd } = p;
    if (!validCommand(cmd)) fail(`command ${cmd.request_id} fails command.schema.json: ${ajv.errorsText(validCommand.errors)}`);
    const h = headers();
    h.set('Bookline-Schema', String(cmd.v));
    h.set('Bookline-Request-Id', cmd.request_id);
    h.set('Content-Type', 'application/json');
    // msgID sets Nats-Msg-Id, expect.streamName Nats-Expected-Stream
    return js.publish(`bookline.cmd.${cmd.calendar_id}`, sc.encode(JSON.stringify(cmd)), {
      msgID: `${cmd.calendar_id}:${cmd.request_id}`, headers: h, expect: { streamName: 'BOOKLINE_CMD' },
    });
  };
  for (const p of plan) {
    const pa = await publish(p);
    if (pa.stream !== 'BOOKLINE_CMD' || pa.duplicate) fail(`PubAck of ${p.cmd.request_id}: ${JSON.stringify(pa)}`);
    p.seq = pa.seq;
    bySeq.set(pa.seq, p);
  }
  const again = await publish(plan[twiceIdx]);
  if (!again.duplicate || again.seq !== plan[twiceIdx].seq) {
    fail(`re-publish with the same Nats-Msg-Id was not a duplicate: ${JSON.stringify(again)}`);
  }

  // --- read the batches
  const consumer = await js.consumers.get('BOOKLINE_EVT', { filterSubjects: ['bookline.evt-batch.>'] });
  const messages = await consumer.consume({ max_messages: 64, expires: 2000 });
  let timedOut = false;
  const timer = setTimeout(() => { timedOut = true; messages.stop(); }, DEADLINE_MS);
  const seen = new Map(); // msg_id -> line
  const lastSeq = new Map(); // calendar -> last command_seq seen
  let batches = 0, lines = 0;
  for await (const m of messages) {
    batches++;
    const where = `batch ${m.subject} #${m.seq}`;
    const hdr = (k) => m.headers?.get(k) ?? '';
    const pm = /^bookline\.evt-batch\.(0|[1-9][0-9]*)$/.exec(m.subject);
    if (!pm) fail(`${where}: subject is not bookline.evt-batch.<p>`);
    const body = sc.decode(m.data);
    if (!body.endsWith('\n')) fail(`${where}: payload does not end with a line break`);
    const raw = body.replace(/\n$/, '').split('\n');
    const stream = hdr('Bookline-Command-Stream');
    const created = createdNanos(stream);
    if (created === null) fail(`${where}: Bookline-Command-Stream ${JSON.stringify(stream)} is not BOOKLINE_CMD@<RFC 3339 UTC>`);
    if (hdr('Bookline-Event-Count') !== String(raw.length)) fail(`${where}: Bookline-Event-Count ${JSON.stringify(hdr('Bookline-Event-Count'))}, lines ${raw.length}`);
    if (hdr('Bookline-Schema') !== '1') fail(`${where}: Bookline-Schema ${JSON.stringify(hdr('Bookline-Schema'))}`);
    if (hdr('Content-Type') !== 'application/x-ndjson') fail(`${where}: Content-Type ${JSON.stringify(hdr('Content-Type'))}`);
    if (hdr('Nats-Expected-Stream') !== 'BOOKLINE_EVT') fail(`${where}: Nats-Expected-Stream ${JSON.stringify(hdr('Nats-Expected-Stream'))}`);
    const ids = [];
    let prev = 0;
    for (const text of raw) {
      lines++;
      let l;
      try { l = JSON.parse(text); } catch (e) { fail(`${where}: a line is not JSON: ${e.message}`); continue; }
      if (!validLine(l)) { fail(`${where}: line ${text.slice(0, 120)} fails event-batch-line.schema.json: ${ajv.errorsText(validLine.errors)}`); continue; }
      if (!validEvent(l.event)) fail(`${where}: event of ${l.msg_id} fails event.schema.json: ${ajv.errorsText(validEvent.errors)}`);
      if (l.command_stream !== stream) fail(`${where}: line ${l.msg_id} has command_stream ${l.command_stream}, the batch ${stream}`);
      const idTail = l.part ? `${l.command_seq}.${l.part}` : `${l.command_seq}`;
      if (l.msg_id !== `evt-${created}-${idTail}`) fail(`${where}: msg_id ${l.msg_id}, expected evt-${created}-${idTail}`);
      ids.push(idTail);
      if (l.command_seq < prev) fail(`${where}: lines not in command_seq order (${l.command_seq} after ${prev})`);
      prev = l.command_seq;
      const cal = l.event.calendar_id;
      if (pm && cal && fnv32a(cal) % PARTITIONS !== Number(pm[1])) fail(`${where}: event of calendar ${cal} in the batch of another partition`);
      if (seen.has(l.msg_id)) continue; // at least once: dedupe by msg_id (section 11)
      seen.set(l.msg_id, l);
      if (l.subject !== `bookline.evt.${cal}`) fail(`${where}: ${l.msg_id} has subject ${l.subject}, its event calendar_id ${cal}`);
      if (l.command_seq <= (lastSeq.get(cal) ?? 0)) fail(`${where}: calendar ${cal}: command_seq ${l.command_seq} after ${lastSeq.get(cal)}`);
      lastSeq.set(cal, l.command_seq);
      const p = bySeq.get(l.command_seq);
      if (!p) { fail(`${where}: an event for command ${l.command_seq}, which this check did not publish: ${text.slice(0, 200)}`); continue; }
      p.event = l.event;
      const e = l.event;
      if (e.seq !== p.seq) fail(`${where}: ${p.cmd.request_id}: payload seq ${e.seq}, its command is ${p.seq}`);
      if (e.request_id !== p.cmd.request_id || e.calendar_id !== p.cmd.calendar_id || e.type !== p.cmd.type) {
        fail(`${where}: event ${l.msg_id} is ${e.type} ${e.calendar_id}/${e.request_id}, its command ${p.cmd.type} ${p.cmd.calendar_id}/${p.cmd.request_id}`);
      }
      const got = e.outcome === 'accepted' ? 'accepted' : e.code;
      if (got !== p.expect) fail(`${where}: ${p.cmd.type} ${p.cmd.calendar_id}/${p.cmd.request_id}: ${got}, expected ${p.expect}`);
    }
    const wantID = ids.length ? `evtb-${created}-${ids[0]}-${ids[ids.length - 1]}-${fnv64aHex(ids.map((i) => i + '\n').join(''))}` : '';
    if (hdr('Nats-Msg-Id') !== wantID) fail(`${where}: Nats-Msg-Id ${hdr('Nats-Msg-Id')}, expected ${wantID}`);
    if (plan.every((p) => p.event)) break;
  }
  clearTimeout(timer);
  messages.stop();
  const missing = plan.filter((p) => !p.event);
  if (missing.length) {
    fail(`${timedOut ? `after ${DEADLINE_MS / 1000}s` : 'consumer ended'}: no event for ${missing.length} of ${plan.length} commands: ${missing.map((p) => `${p.cmd.calendar_id}@${p.seq}`).join(', ')}`);
  }
  // With --event-batches no event of a calendar is a message of its own.
  const info = await jsm.streams.info('BOOKLINE_EVT', { subjects_filter: 'bookline.evt.>' });
  const alone = Object.entries(info.state.subjects ?? {});
  if (alone.length) fail(`events stored alone despite --event-batches: ${JSON.stringify(Object.fromEntries(alone))}`);
  console.log(`evt-batch: ${plan.length} commands (+1 duplicate publish), ${seen.size} events in ${lines} lines of ${batches} batches on ${[...parts].sort().map((p) => `bookline.evt-batch.${p}`).join(', ')}`);
} finally {
  await nc.close();
}
if (problems.length) {
  for (const p of problems) console.error('FAIL', p);
  process.exit(1);
}
console.log('ok event batches (nats.js)');
