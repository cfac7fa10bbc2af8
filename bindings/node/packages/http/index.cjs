'use strict';
// @portcullis/http: the classes of @portcullis/core that this unit names (one addon, one
// set of classes, so `instanceof` holds across packages).
const core = require('@portcullis/core');

module.exports = {
  HttpInputPolicy: core.HttpInputPolicy,
  HttpToolCallPolicy: core.HttpToolCallPolicy,
  HttpOutputPolicy: core.HttpOutputPolicy,
  HttpToolResultPolicy: core.HttpToolResultPolicy,
};
