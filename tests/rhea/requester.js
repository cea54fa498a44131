'use strict';
// A rhea client: requests to `address` with reply-to set to its dynamic receiver's address.
const { args, deadline, connect, finish } = require('./common');

const opts = args();
deadline(opts.timeout || 20);
const conn = connect(opts, 'rhea-requester');
const responses = [];
let replyTo;

const replies = conn.open_receiver({ source: { dynamic: true } });
replies.on('message', (ctx) => {
  const m = ctx.message;
  responses.push({ correlation_id: m.correlation_id, body: m.body, to: m.to || null });
  if (responses.length === opts.count) {
    finish([conn], { reply_to: replyTo, responses: responses });
  }
});
replies.once('receiver_open', (ctx) => {
  replyTo = ctx.receiver.source.address;
  const sender = conn.open_sender({ target: opts.address });
  let sent = 0;
  sender.on('sendable', (sctx) => {
    while (sctx.sender.sendable() && sent < opts.count) {
      sctx.sender.send({ reply_to: replyTo, correlation_id: `req-${sent}`, body: `ping ${sent}` });
      sent += 1;
    }
  });
});
