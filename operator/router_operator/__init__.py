"""The Routernet operator: Router, Address and LinkRoute custom resources reconciled into
router networks."""
