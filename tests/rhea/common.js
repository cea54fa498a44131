'use strict';
// Shared by the interoperability scripts: arguments arrive as one JSON object (argv[2]); results
// leave as JSON lines on stdout ({"event": ...} while running, then one {"result": ...}).
// Every script has a hard deadline so a stuck test can never hang pytest.

const rhea = require('rhea');

function args() {
  return JSON.parse(process.argv[2]);
}

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

// process.exit() drops stdout still queued for a full pipe: exit once the last line is out.
// Only the first final line counts (a result, or the first error).
let exiting = false;
function emitAndExit(obj, code) {
  if (exiting) return;
  exiting = true;
  process.stdout.write(JSON.stringify(obj) + '\n', () => process.exit(code));
}

function deadline(seconds) {
  const timer = setTimeout(() => {
    emitAndExit({ error: `timed out after ${seconds}s` }, 3);
  }, seconds * 1000);
  return timer;
}

// One rhea container per script; connect() never reconnects, so a refused connection fails fast.
function connect(opts, id) {
  const container = rhea.create_container({ id: id });
  const conn = container.connect({ host: opts.host, port: opts.port, reconnect: false });
  conn.on('error', (ctx) => fail(`connection error: ${JSON.stringify(ctx.error || null)}`));
  conn.on('disconnected', (ctx) => {
    if (!conn.closing_by_us) fail(`disconnected: ${ctx.error ? ctx.error.message : 'unknown'}`);
  });
  return conn;
}

function fail(why) {
  emitAndExit({ error: why }, 2);
}

// Close every connection, then print the result and exit once they are closed (or after 2s).
function finish(conns, result) {
  let open = conns.length;
  const done = () => emitAndExit({ result: result }, 0);
  setTimeout(done, 2000);
  for (const c of conns) {
    c.closing_by_us = true;
    c.once('connection_close', () => {
      open -= 1;
      if (open === 0) done();
    });
    c.close();
  }
}

function bodyFor(i) {
  // Even: an amqp-value string (multi-byte UTF-8); odd: an amqp-value binary.
  if (i % 2 === 0) return `message ${i} ünïcødé ✓ ` + 'x'.repeat(i % 50);
  return Buffer.alloc((i % 100) + 1, i % 256);
}

function describeBody(body) {
  return Buffer.isBuffer(body) ? { binary: body.toString('hex') } : body;
}

module.exports = { rhea, args, emit, deadline, connect, fail, finish, bodyFor, describeBody };
