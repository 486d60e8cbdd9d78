module github.com/specula-dev/specula

go 1.26.0

require (
	github.com/BurntSushi/toml v1.6.0
	golang.org/x/text v0.44.0
)
