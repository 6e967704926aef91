package aichat

// OptionsOf is optionsOf, for the tests of package aichat_test.
var OptionsOf = optionsOf
