'use strict';
// A rhea consumer: takes `count` messages from `address` and settles the n-th as `actions[n]`
// says (accept, the default; release; fail, a modified outcome with delivery-failed; reject,
// with opts.reject as the error). Reports each message as received. `selector` adds a JMS
// selector filter; `durable` makes the source a durable subscription (container_id and name
// identify it) and the link is then detached, not closed, at the end; count 0 only attaches.
const { rhea, args, emit, deadline, connect, finish, fail } = require('./common');

const opts = args();
deadline(opts.timeout || 20);
const conn = connect(opts, opts.container_id || 'rhea-consume');
const source = { address: opts.address };
if (opts.selector) source.filter = rhea.filter.selector(opts.selector);
if (opts.durable) Object.assign(source, { durable: 2, expiry_policy: 'never' });
// credit_window 1: rhea 3.0.5 merges consecutive pending dispositions into one frame with the
// first one's outcome (see rejecter.js), so no two may be pending together.
const receiver = conn.open_receiver({
  name: opts.name,
  source: source,
  autoaccept: false,
  credit_window: 1,
});
const received = [];
let done = false;

function end() {
  if (done) return;
  done = true;
  const result = { received: received };
  if (!opts.durable) {
    // Give the last disposition a moment to leave before the connection closes.
    setTimeout(() => finish([conn], result), 100);
    return;
  }
  // Detach (closed=false), so the subscription outlives the link.
  receiver.once('receiver_close', () => finish([conn], result));
  setTimeout(() => receiver.detach(), 100);
}

receiver.once('receiver_open', (ctx) => {
  const filter = ctx.receiver.remote.attach.source.filter;
  emit({ event: 'ready', filter: filter ? Object.keys(filter) : null });
  if (opts.count === 0) end();
});
receiver.on('receiver_error', (ctx) => fail(`receiver refused: ${JSON.stringify(ctx.receiver.error)}`));
receiver.on('message', (ctx) => {
  const m = ctx.message;
  received.push({
    body: m.body,
    delivery_count: m.delivery_count || 0,
    annotations: m.message_annotations || {},
    properties: m.application_properties || {},
  });
  const action = (opts.actions || [])[received.length - 1] || 'accept';
  if (action === 'accept') ctx.delivery.accept();
  else if (action === 'release') ctx.delivery.release();
  else if (action === 'fail') ctx.delivery.modified({ delivery_failed: true });
  else if (action === 'reject') ctx.delivery.reject(opts.reject);
  else fail(`unknown action ${action}`);
  if (received.length === opts.count) end();
});
