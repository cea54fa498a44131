'use strict';
// A rhea receiver that rejects every message with an error condition (name, description, info).
const { args, emit, deadline, connect, finish } = require('./common');

const opts = args();
deadline(opts.timeout || 20);
const conn = connect(opts, 'rhea-rejecter');
// credit_window 1: rhea 3.0.5 merges two consecutive pending dispositions into one range frame
// with the first one's state even when the outcomes differ (write_dispositions() in
// lib/session.js only compares outcomes once a range has two members), so rejections with
// different errors must not be pending together.
const receiver = conn.open_receiver({ source: opts.address, autoaccept: false, credit_window: 1 });
const seen = [];

receiver.once('receiver_open', () => emit({ event: 'ready' }));
receiver.on('message', (ctx) => {
  const body = ctx.message.body;
  seen.push(body);
  ctx.delivery.reject({
    condition: 'app:rejected-by-test',
    description: `no thanks: ${body}`,
    info: { reason: 'interop', seq: seen.length },
  });
  if (seen.length === opts.count) {
    // Give the dispositions a moment to leave before closing.
    setTimeout(() => finish([conn], { rejected: seen }), 200);
  }
});
