'use strict';
// @portcullis/dsl: the classes of @portcullis/core that this unit names (one addon, one
// set of classes, so `instanceof` holds across packages).
const core = require('@portcullis/core');

module.exports = {
  DslInputPolicy: core.DslInputPolicy,
  DslToolCallPolicy: core.DslToolCallPolicy,
  DslOutputPolicy: core.DslOutputPolicy,
  DslToolResultPolicy: core.DslToolResultPolicy,
};
