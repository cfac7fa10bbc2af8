'use strict';
// @portcullis/rego: the classes of @portcullis/core that this unit names (one addon, one
// set of classes, so `instanceof` holds across packages).
const core = require('@portcullis/core');

module.exports = {
  RegoInputPolicy: core.RegoInputPolicy,
  RegoToolCallPolicy: core.RegoToolCallPolicy,
  RegoOutputPolicy: core.RegoOutputPolicy,
  RegoToolResultPolicy: core.RegoToolResultPolicy,
};
