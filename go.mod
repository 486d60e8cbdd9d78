module github.com/specula-dev/specula

go 1.26
