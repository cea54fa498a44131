'use strict';
// A rhea service: answers each request on `address` at its reply-to, through an anonymous
// sender, echoing the correlation id and upper-casing the body.
const { args, emit, deadline, connect, finish } = require('./common');

const opts = args();
deadline(opts.timeout || 20);
const conn = connect(opts, 'rhea-responder');
const answers = conn.open_sender({ target: {} });
const requests = conn.open_receiver({ source: opts.address });
let served = 0;
let opened = 0;

function opened1() {
  opened += 1;
  if (opened === 2) emit({ event: 'ready' });
}
answers.once('sendable', opened1);
requests.once('receiver_open', opened1);

requests.on('message', (ctx) => {
  const m = ctx.message;
  answers.send({ to: m.reply_to, correlation_id: m.correlation_id, body: String(m.body).toUpperCase() });
  served += 1;
});
answers.on('accepted', () => {
  if (--opts.count === 0) finish([conn], { served: served });
});
