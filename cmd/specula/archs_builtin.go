package main

// Every built-in architecture registers itself in the program's registry.
import _ "github.com/specula-dev/specula/arch/all"
