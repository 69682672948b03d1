package engine

import "testing"

func TestGood_One(t *testing.T) {}

func TestGood_Two(t *testing.T) {}
