'use strict';
// @portcullis/rego-rest: the classes of @portcullis/core that this unit names (one addon, one
// set of classes, so `instanceof` holds across packages).
const core = require('@portcullis/core');

module.exports = {
  RegoServerInputPolicy: core.RegoServerInputPolicy,
  RegoServerToolCallPolicy: core.RegoServerToolCallPolicy,
  RegoServerOutputPolicy: core.RegoServerOutputPolicy,
  RegoServerToolResultPolicy: core.RegoServerToolResultPolicy,
};
