package sdk

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// FilePrefix starts every plugin binary's file name.
const FilePrefix = "specula-plugin-"

// ChecksumSuffix ends the name of the file beside a plugin binary that holds
// its lowercase hex SHA-256.
const ChecksumSuffix = "_SHA256SUM"

// FileName is a plugin binary's parsed file name:
// specula-plugin-<name>_v<version>_x<api major>.<api minor>_<os>_<arch>.
type FileName struct {
	Name, Version      string
	APIMajor, APIMinor int
	OS, Arch           string
}

// String formats the file name.
func (f FileName) String() string {
	return fmt.Sprintf("%s%s_v%s_x%d.%d_%s_%s", FilePrefix, f.Name, f.Version, f.APIMajor, f.APIMinor, f.OS, f.Arch)
}

// fileNameRE splits a file name; the name may hold '-' but not '_'.
var fileNameRE = regexp.MustCompile(`^` + regexp.QuoteMeta(FilePrefix) + `([a-z0-9][a-z0-9.-]*)_v([^_]+)_x([0-9]+)\.([0-9]+)_([a-z0-9]+)_([a-z0-9]+)$`)

// ParseFileName parses a plugin binary's base name.
func ParseFileName(base string) (FileName, error) {
	m := fileNameRE.FindStringSubmatch(base)
	if m == nil {
		return FileName{}, fmt.Errorf("%q is not a plugin file name (want %s<name>_v<semver>_x<api major>.<api minor>_<os>_<arch>, name in lowercase letters, digits, '-' and '.')", base, FilePrefix)
	}
	if !validVersion(m[2]) {
		return FileName{}, fmt.Errorf("plugin file %s: version %q is not a semantic version", base, m[2])
	}
	major, err1 := strconv.Atoi(m[3])
	minor, err2 := strconv.Atoi(m[4])
	if err1 != nil || err2 != nil {
		return FileName{}, fmt.Errorf("plugin file %s: bad API version x%s.%s", base, m[3], m[4])
	}
	return FileName{Name: m[1], Version: m[2], APIMajor: major, APIMinor: minor, OS: m[5], Arch: m[6]}, nil
}

// semverRE is semver 2.0.0 without the leading v.
var semverRE = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

func validVersion(v string) bool { return semverRE.MatchString(v) && !strings.Contains(v, "_") }

// ValidName reports whether name can be a plugin's name in a file name.
func ValidName(name string) bool {
	return regexp.MustCompile(`^[a-z0-9][a-z0-9.-]*$`).MatchString(name)
}
