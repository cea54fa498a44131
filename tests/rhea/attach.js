'use strict';
// A rhea sender and receiver on `address`: reports the addresses the router's answering attaches
// carry (`link.remote.attach.target/source.address`), which a rhea application reads to know
// what it attached to, and any error the router detached them with.
const { args, deadline, connect, finish } = require('./common');

const opts = args();
deadline(opts.timeout || 20);
const conn = connect(opts, opts.container_id || 'rhea-attach');
const result = {};

function answered(key, link, terminus) {
  const attach = link.remote.attach;
  const answer = attach && attach[terminus];
  result[key] = answer ? answer.address : null;
  if ('target' in result && 'source' in result) finish([conn], result);
}

const sender = conn.open_sender({ target: opts.address });
sender.on('sender_open', (ctx) => answered('target', ctx.sender, 'target'));
sender.on('sender_error', (ctx) => {
  result.sender_error = ctx.sender.error ? ctx.sender.error.condition : 'none';
});
const receiver = conn.open_receiver({ source: opts.address, credit_window: 0 });
receiver.on('receiver_open', (ctx) => answered('source', ctx.receiver, 'source'));
receiver.on('receiver_error', (ctx) => {
  result.receiver_error = ctx.receiver.error ? ctx.receiver.error.condition : 'none';
});
