//! The `GstTracer` subclass: parses the settings and forwards hooks, each through
//! [`guarded`] so that no panic crosses into C.

use std::sync::atomic::{AtomicBool, Ordering};

use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;

use super::guard::{self, guarded};
use super::recorder;
use super::session;
use super::settings::Settings;

/// Implementation of the latlab tracer.
#[derive(Default)]
pub struct LatlabTracer {
    /// Whether this instance started the recorder (and so closes it).
    recording: AtomicBool,
}

#[glib::object_subclass]
impl ObjectSubclass for LatlabTracer {
    const NAME: &'static str = "GstLatlabTracer";
    type Type = super::LatlabTracer;
    type ParentType = gst::Tracer;
}

impl ObjectImpl for LatlabTracer {
    fn constructed(&self) {
        self.parent_constructed();
        guarded("constructed", || self.start());
    }

    fn dispose(&self) {
        guard::contained("dispose", || {
            if self.recording.swap(false, Ordering::SeqCst) {
                session::shutdown();
            }
        });
    }
}

impl LatlabTracer {
    /// Opens the trace and registers the hooks (none when nothing will be recorded).
    fn start(&self) {
        let params = self.obj().property::<Option<String>>("params");
        let settings = Settings::from_params(params.as_deref());
        guard::configure_injection();
        if !session::start(&settings) {
            return;
        }
        self.recording.store(true, Ordering::SeqCst);
        for hook in [
            TracerHook::PadPushPre,
            TracerHook::PadPushPost,
            TracerHook::PadPushListPre,
            TracerHook::PadPushListPost,
            TracerHook::PadPushEventPre,
            TracerHook::PadLinkPost,
            TracerHook::ElementChangeStatePost,
            TracerHook::ObjectDestroyed,
        ] {
            self.register_hook(hook);
        }
    }
}

impl GstObjectImpl for LatlabTracer {}

impl TracerImpl for LatlabTracer {
    fn pad_push_pre(&self, _ts: u64, pad: &gst::Pad, buffer: &gst::Buffer) {
        guarded("pad-push-pre", || {
            guard::injection_point();
            recorder::on_push(pad, buffer)
        });
    }

    fn pad_push_post(
        &self,
        _ts: u64,
        pad: &gst::Pad,
        _result: Result<gst::FlowSuccess, gst::FlowError>,
    ) {
        guarded("pad-push-post", || recorder::on_push_post(pad));
    }

    fn pad_push_list_pre(&self, _ts: u64, pad: &gst::Pad, list: &gst::BufferList) {
        guarded("pad-push-list-pre", || recorder::on_push_list(pad, list));
    }

    fn pad_push_list_post(
        &self,
        _ts: u64,
        pad: &gst::Pad,
        _result: Result<gst::FlowSuccess, gst::FlowError>,
    ) {
        guarded("pad-push-list-post", || recorder::on_push_post(pad));
    }

    fn pad_push_event_pre(&self, _ts: u64, pad: &gst::Pad, event: &gst::Event) {
        guarded("pad-push-event-pre", || recorder::on_event(pad, event));
    }

    fn pad_link_post(
        &self,
        _ts: u64,
        src: &gst::Pad,
        _sink: &gst::Pad,
        result: Result<gst::PadLinkSuccess, gst::PadLinkError>,
    ) {
        if result.is_ok() {
            guarded("pad-link-post", || recorder::on_link(src));
        }
    }

    fn element_change_state_post(
        &self,
        _ts: u64,
        element: &gst::Element,
        change: gst::StateChange,
        result: Result<gst::StateChangeSuccess, gst::StateChangeError>,
    ) {
        guarded("element-change-state-post", || {
            recorder::on_state_changed(element, change, result)
        });
    }

    fn object_destroyed(&self, _ts: u64, object: std::ptr::NonNull<gst::ffi::GstObject>) {
        guarded("object-destroyed", || {
            recorder::on_object_destroyed(object.as_ptr() as usize)
        });
    }
}
