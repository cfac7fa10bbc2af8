'use strict';
// @portcullis/observability: the exporter of @portcullis/core's addon (it runs in Rust, fed by
// the engine without a call into JavaScript).
const core = require('@portcullis/core');

module.exports = {
  createObservabilityAuditHandler: core.createObservabilityAuditHandler,
};
