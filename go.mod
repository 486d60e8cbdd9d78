module github.com/specula-dev/specula

go 1.26

require golang.org/x/text v0.44.0
