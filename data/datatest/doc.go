// Package datatest holds test helpers for code built on package data. It is
// imported by tests only, so none of it ships in the binary.
package datatest
